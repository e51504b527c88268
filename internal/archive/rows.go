package archive

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// State is the terminal state of an archived reservation.
type State int16

// Terminal states, as stored in cycles_reservations.state.
const (
	StateCommitted State = 1
	StateReleased  State = 2
	StateExpired   State = 3
)

// Reservation is one settled reservation: every field of the Redis record
// that GET, LIST and the replays render, plus the settle time.
type Reservation struct {
	TenantID      string
	ReservationID string
	// SettledAt is finalized_at (committed, released) or expired_at, from
	// Redis TIME; it picks the day partition.
	SettledAt    time.Time
	State        State
	Unit         string
	ScopePath    string
	Estimate     int64
	Charged      *int64
	DebtIncurred int64
	CreatedAtMs  int64
	ExpiresAtMs  int64
	GraceMs      int32
	ExtCount     int16
	MaxExt       int16
	// Policy is "" or one of the names PolicyCode knows (a smallint column).
	Policy  string
	IdemKey string
	Subject string
	// Action is the action JSON when ActionKind is "": ActionKind and
	// ActionName hold the action {"kind":K,"name":N} split (ActionOf
	// renders it back).
	Action            string
	ActionKind        string
	ActionName        string
	Affected          string
	Budgeted          string
	Metadata          string
	CommittedMetadata string
	// Replay holds the stored replies of the settling call.
	Replay []byte
}

// Entry is an archived event or audit entry: its id, time and the bytes it
// was rendered with.
type Entry struct {
	TenantID   string
	ID         string
	OccurredAt time.Time
	// Seq is the sequence part of the entry's stream id (OccurredAt is its
	// ms part): the stream's order.
	Seq int64
	// Global marks an audit entry of the global audit log.
	Global bool
	Body   []byte
}

// queueReservations queues the statement that writes rows (column arrays
// through unnest: one statement, no parameter limit), skipping rows
// present, into q; *written is set to the rows inserted once q ran. Rows it
// cannot write are refused before anything is queued.
func queueReservations(q *pgx.Batch, rows []Reservation, written *int64) error {
	if len(rows) == 0 {
		return nil
	}
	n := len(rows)
	var (
		tenant, scope, idem, subject, action = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		kind, name                           = make([]string, n), make([]string, n)
		policy, unit                         = make([]int16, n), make([]int16, n)
		rid                                  = make([][16]byte, n)
		id                                   = make([]string, n)
		affected, budgeted, meta, cmeta      = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		settled                              = make([]time.Time, n)
		state                                = make([]int16, n)
		estimate, debt, created, expires     = make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
		charged                              = make([]*int64, n)
		grace                                = make([]int32, n)
		ext, maxExt                          = make([]int16, n), make([]int16, n)
		replay                               = make([][]byte, n)
	)
	for i, r := range rows {
		if r.TenantID == "" || r.ReservationID == "" || r.SettledAt.IsZero() {
			return fmt.Errorf("archive: reservation %q of tenant %q: missing id, tenant or settle time", r.ReservationID, r.TenantID)
		}
		rid[i], id[i] = encodeID(r.TenantID, r.ReservationID)
		tenant[i], settled[i], state[i] = r.TenantID, r.SettledAt, int16(r.State)
		var ok bool
		if unit[i], ok = UnitCode(r.Unit); !ok {
			return fmt.Errorf("archive: reservation %q of tenant %q: unit %q has no code", r.ReservationID, r.TenantID, r.Unit)
		}
		scope[i], estimate[i], charged[i], debt[i] = r.ScopePath, r.Estimate, r.Charged, r.DebtIncurred
		created[i], expires[i], grace[i], ext[i], maxExt[i] = r.CreatedAtMs, r.ExpiresAtMs, r.GraceMs, r.ExtCount, r.MaxExt
		code, ok := PolicyCode(r.Policy)
		if !ok {
			return fmt.Errorf("archive: reservation %q of tenant %q: policy %q has no code", r.ReservationID, r.TenantID, r.Policy)
		}
		policy[i], idem[i], subject[i], action[i], kind[i], name[i] = code, r.IdemKey, r.Subject, r.Action, r.ActionKind, r.ActionName
		affected[i], budgeted[i], meta[i], cmeta[i], replay[i] = r.Affected, r.Budgeted, r.Metadata, r.CommittedMetadata, r.Replay
	}
	q.Queue(`INSERT INTO cycles_reservations (tenant_id, rid, reservation_id, settled_at, state, unit,
		scope_path, estimate, charged, debt_incurred, created_at_ms, expires_at_ms, grace_ms, ext_count, max_ext,
		policy, idem_key, subject, action, affected, budgeted, metadata, committed_metadata, replay, action_kind,
		action_name)
		SELECT * FROM unnest($1::text[], $2::uuid[], $3::text[], $4::timestamptz[], $5::smallint[], $6::smallint[],
		$7::text[], $8::bigint[], $9::bigint[], $10::bigint[], $11::bigint[], $12::bigint[], $13::integer[],
		$14::smallint[], $15::smallint[], $16::smallint[], $17::text[], $18::text[], $19::text[], $20::text[],
		$21::text[], $22::text[], $23::text[], $24::bytea[], $25::text[], $26::text[])
		ON CONFLICT DO NOTHING`,
		tenant, rid, id, settled, state, unit, scope, estimate, charged, debt, created, expires, grace, ext, maxExt,
		policy, idem, subject, action, affected, budgeted, meta, cmeta, replay, kind, name).Exec(rowsAffected(written))
	return nil
}

// rowsAffected is a batch callback that stores a statement's row count.
func rowsAffected(n *int64) func(pgconn.CommandTag) error {
	return func(tag pgconn.CommandTag) error {
		*n = tag.RowsAffected()
		return nil
	}
}

// queueEntries queues the statement that writes events or audit entries,
// skipping rows present (as queueReservations).
func queueEntries(q *pgx.Batch, table, idCol string, rows []Entry, written *int64) error {
	if len(rows) == 0 {
		return nil
	}
	n := len(rows)
	tenant, id, at, body := make([]string, n), make([]string, n), make([]time.Time, n), make([][]byte, n)
	seq, global := make([]int64, n), make([]bool, n)
	for i, e := range rows {
		if e.TenantID == "" || e.ID == "" || e.OccurredAt.IsZero() || e.Body == nil || e.Seq < 0 {
			return fmt.Errorf("archive: %s row %q of tenant %q: missing id, tenant, time or body", table, e.ID, e.TenantID)
		}
		tenant[i], id[i], at[i], body[i], seq[i], global[i] = e.TenantID, e.ID, e.OccurredAt, e.Body, e.Seq, e.Global
	}
	if table == tableAudit {
		q.Queue(fmt.Sprintf(`INSERT INTO %s (tenant_id, %s, occurred_at, body, seq, global)
		SELECT * FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::bytea[], $5::bigint[], $6::boolean[])
		ON CONFLICT DO NOTHING`, table, idCol), tenant, id, at, body, seq, global).Exec(rowsAffected(written))
	} else {
		q.Queue(fmt.Sprintf(`INSERT INTO %s (tenant_id, %s, occurred_at, body, seq)
		SELECT * FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::bytea[], $5::bigint[])
		ON CONFLICT DO NOTHING`, table, idCol), tenant, id, at, body, seq).Exec(rowsAffected(written))
	}
	return nil
}

// queueFeed queues the statement that writes entries of the all-tenant
// feed, skipping rows present (as queueReservations).
func queueFeed(q *pgx.Batch, rows []Entry, written *int64) error {
	if len(rows) == 0 {
		return nil
	}
	n := len(rows)
	tenant, at, seq, body := make([]string, n), make([]time.Time, n), make([]int64, n), make([][]byte, n)
	for i, e := range rows {
		if e.OccurredAt.IsZero() || e.Body == nil || e.Seq < 0 {
			return fmt.Errorf("archive: feed row %d-%d: missing time or body", e.OccurredAt.UnixMilli(), e.Seq)
		}
		tenant[i], at[i], seq[i], body[i] = e.TenantID, e.OccurredAt, e.Seq, e.Body
	}
	q.Queue(`INSERT INTO cycles_feed (occurred_at, seq, tenant_id, body)
		SELECT * FROM unnest($1::timestamptz[], $2::bigint[], $3::text[], $4::bytea[])
		ON CONFLICT DO NOTHING`, at, seq, tenant, body).Exec(rowsAffected(written))
	return nil
}

// GetReservation returns an archived reservation of a tenant (false: not
// archived, or its day was dropped past the retention).
func (s *Store) GetReservation(ctx context.Context, tenant, id string) (Reservation, bool, error) {
	key, whole := encodeID(tenant, id)
	r, err := scanReservation(s.pool.QueryRow(ctx, `SELECT tenant_id, rid, reservation_id, settled_at, state, unit,
		scope_path, estimate, charged, debt_incurred, created_at_ms, expires_at_ms, grace_ms, ext_count, max_ext,
		policy, idem_key, subject, action, affected, budgeted, metadata, committed_metadata, replay, action_kind,
		action_name FROM cycles_reservations WHERE tenant_id = $1 AND rid = $2 AND reservation_id = $3`,
		tenant, key, whole))
	if errors.Is(err, pgx.ErrNoRows) {
		return Reservation{}, false, nil
	}
	if err != nil {
		return Reservation{}, false, fmt.Errorf("archive: get reservation %s: %w", id, err)
	}
	return r, true, nil
}

// encodeID keys a reservation id: the canonical r_<tenant>_<32 hex> by its
// 128 random bits (whole: ""), any other id by its MD5, kept whole.
func encodeID(tenant, id string) (key [16]byte, whole string) {
	prefix := "r_" + tenant + "_"
	if rest, ok := strings.CutPrefix(id, prefix); ok && len(rest) == 32 && strings.ToLower(rest) == rest {
		if _, err := hex.Decode(key[:], []byte(rest)); err == nil {
			return key, ""
		}
	}
	return md5.Sum([]byte(id)), id
}

// decodeID is encodeID's inverse.
func decodeID(tenant string, key [16]byte, whole string) string {
	if whole != "" {
		return whole
	}
	return "r_" + tenant + "_" + hex.EncodeToString(key[:])
}

// codes map the names a smallint column stands for (a lookup table in the
// schema names them for analysts); "" (absent) is 0.
type codes map[string]int16

// policyCodes are the policy column's codes (cycles_policies).
var policyCodes = codes{"": 0, "REJECT": 1, "ALLOW_IF_AVAILABLE": 2, "ALLOW_WITH_OVERDRAFT": 3}

// unitCodes are the unit column's codes (cycles_units), the numbers of the
// cycles.v1.Unit enum.
var unitCodes = codes{"": 0, "USD_MICROCENTS": 1, "TOKENS": 2, "CREDITS": 3, "RISK_POINTS": 4}

func (c codes) name(code int16) (string, error) {
	for name, v := range c {
		if v == code {
			return name, nil
		}
	}
	return "", fmt.Errorf("code %d", code)
}

// sqlName is a SQL expression naming col's code, for queries that group or
// order by the name.
func (c codes) sqlName(col string) string {
	var b strings.Builder
	b.WriteString("(CASE " + col)
	for name, v := range c {
		fmt.Fprintf(&b, " WHEN %d THEN '%s'", v, name)
	}
	b.WriteString(" END)")
	return b.String()
}

// PolicyCode is the policy column's code for a resolved overage policy
// (false: the column cannot hold it).
func PolicyCode(p string) (int16, bool) {
	c, ok := policyCodes[p]
	return c, ok
}

// UnitCode is the unit column's code for a unit name (false: the column
// cannot hold it).
func UnitCode(u string) (int16, bool) {
	c, ok := unitCodes[u]
	return c, ok
}
