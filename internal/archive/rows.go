package archive

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
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
	SettledAt         time.Time
	State             State
	Unit              string
	ScopePath         string
	Estimate          int64
	Charged           *int64
	DebtIncurred      int64
	CreatedAtMs       int64
	ExpiresAtMs       int64
	GraceMs           int64
	ExtCount          int32
	MaxExt            int32
	Policy            string
	IdemKey           string
	Subject           string
	Action            string
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
	Body       []byte
}

// insertReservations writes rows in one statement (column arrays through
// unnest: one round trip, no parameter limit), skipping rows present.
func insertReservations(ctx context.Context, tx pgx.Tx, rows []Reservation) (int64, error) {
	if len(rows) == 0 {
		return 0, nil
	}
	n := len(rows)
	var (
		tenant, id, unit, scope, policy, idem, subject, action = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		affected, budgeted, meta, cmeta                        = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		settled                                                = make([]time.Time, n)
		state                                                  = make([]int16, n)
		estimate, debt, created, expires, grace                = make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
		charged                                                = make([]*int64, n)
		ext, maxExt                                            = make([]int32, n), make([]int32, n)
		replay                                                 = make([][]byte, n)
	)
	for i, r := range rows {
		if r.TenantID == "" || r.ReservationID == "" || r.SettledAt.IsZero() {
			return 0, fmt.Errorf("archive: reservation %q of tenant %q: missing id, tenant or settle time", r.ReservationID, r.TenantID)
		}
		tenant[i], id[i], settled[i], state[i] = r.TenantID, r.ReservationID, r.SettledAt, int16(r.State)
		unit[i], scope[i], estimate[i], charged[i], debt[i] = r.Unit, r.ScopePath, r.Estimate, r.Charged, r.DebtIncurred
		created[i], expires[i], grace[i], ext[i], maxExt[i] = r.CreatedAtMs, r.ExpiresAtMs, r.GraceMs, r.ExtCount, r.MaxExt
		policy[i], idem[i], subject[i], action[i] = r.Policy, r.IdemKey, r.Subject, r.Action
		affected[i], budgeted[i], meta[i], cmeta[i], replay[i] = r.Affected, r.Budgeted, r.Metadata, r.CommittedMetadata, r.Replay
	}
	tag, err := tx.Exec(ctx, `INSERT INTO cycles_reservations (tenant_id, reservation_id, settled_at, state, unit,
		scope_path, estimate, charged, debt_incurred, created_at_ms, expires_at_ms, grace_ms, ext_count, max_ext,
		policy, idem_key, subject, action, affected, budgeted, metadata, committed_metadata, replay)
		SELECT * FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::smallint[], $5::text[], $6::text[],
		$7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[], $11::bigint[], $12::bigint[], $13::integer[],
		$14::integer[], $15::text[], $16::text[], $17::text[], $18::text[], $19::text[], $20::text[], $21::text[],
		$22::text[], $23::bytea[])
		ON CONFLICT DO NOTHING`,
		tenant, id, settled, state, unit, scope, estimate, charged, debt, created, expires, grace, ext, maxExt,
		policy, idem, subject, action, affected, budgeted, meta, cmeta, replay)
	if err != nil {
		return 0, fmt.Errorf("archive: insert reservations: %w", err)
	}
	return tag.RowsAffected(), nil
}

// insertEntries writes events or audit entries, skipping rows present.
func insertEntries(ctx context.Context, tx pgx.Tx, table, idCol string, rows []Entry) (int64, error) {
	if len(rows) == 0 {
		return 0, nil
	}
	n := len(rows)
	tenant, id, at, body := make([]string, n), make([]string, n), make([]time.Time, n), make([][]byte, n)
	for i, e := range rows {
		if e.TenantID == "" || e.ID == "" || e.OccurredAt.IsZero() || e.Body == nil {
			return 0, fmt.Errorf("archive: %s row %q of tenant %q: missing id, tenant, time or body", table, e.ID, e.TenantID)
		}
		tenant[i], id[i], at[i], body[i] = e.TenantID, e.ID, e.OccurredAt, e.Body
	}
	tag, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (tenant_id, %s, occurred_at, body)
		SELECT * FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::bytea[]) ON CONFLICT DO NOTHING`, table, idCol),
		tenant, id, at, body)
	if err != nil {
		return 0, fmt.Errorf("archive: insert %s: %w", table, err)
	}
	return tag.RowsAffected(), nil
}

// GetReservation returns an archived reservation of a tenant (false: not
// archived, or its day was dropped past the retention).
func (s *Store) GetReservation(ctx context.Context, tenant, id string) (Reservation, bool, error) {
	var r Reservation
	var state int16
	err := s.pool.QueryRow(ctx, `SELECT tenant_id, reservation_id, settled_at, state, unit, scope_path, estimate,
		charged, debt_incurred, created_at_ms, expires_at_ms, grace_ms, ext_count, max_ext, policy, idem_key,
		subject, action, affected, budgeted, metadata, committed_metadata, replay
		FROM cycles_reservations WHERE tenant_id = $1 AND reservation_id = $2`, tenant, id).Scan(
		&r.TenantID, &r.ReservationID, &r.SettledAt, &state, &r.Unit, &r.ScopePath, &r.Estimate,
		&r.Charged, &r.DebtIncurred, &r.CreatedAtMs, &r.ExpiresAtMs, &r.GraceMs, &r.ExtCount, &r.MaxExt,
		&r.Policy, &r.IdemKey, &r.Subject, &r.Action, &r.Affected, &r.Budgeted, &r.Metadata,
		&r.CommittedMetadata, &r.Replay)
	if errors.Is(err, pgx.ErrNoRows) {
		return Reservation{}, false, nil
	}
	if err != nil {
		return Reservation{}, false, fmt.Errorf("archive: get reservation %s: %w", id, err)
	}
	r.State = State(state)
	r.SettledAt = r.SettledAt.UTC()
	return r, true, nil
}
