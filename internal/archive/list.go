package archive

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// ReservationQuery selects one page of a tenant's archived reservations in
// the order of a ListReservations index: by creation or expiry time, ties by
// reservation id (bytewise, as Redis orders a sorted set's equal scores).
type ReservationQuery struct {
	Tenant string
	// ByExpiry orders by expires_at_ms instead of created_at_ms.
	ByExpiry bool
	// Desc walks from the newest.
	Desc bool
	// State is 0 for any, else the one terminal state wanted.
	State State
	// IdemKey, when set, is the reserve's idempotency key.
	IdemKey string
	// Segments are scope segments ("workspace:prod") the scope path must
	// contain, each whole.
	Segments []string
	// Inclusive windows in ms (nil: open).
	CreatedFrom, CreatedTo, ExpiresFrom, ExpiresTo, FinalizedFrom, FinalizedTo *int64
	// After, when set, is the position of the last row of the previous
	// page: rows strictly past it in the walk order are returned.
	After *Key
	// Limit is the most rows returned (1..10000).
	Limit int
}

// Key is a reservation's position in a listing: its index score (ms) and
// its id.
type Key struct {
	Score int64
	ID    string
}

// ErrQuery refuses a query the archive does not answer (a bad limit).
var ErrQuery = errors.New("archive: bad reservation query")

// idExpr is the reservation id as text, ordered bytewise (COLLATE "C"),
// the way Redis orders equal scores.
const idExpr = `(CASE WHEN reservation_id = '' THEN 'r_' || tenant_id || '_' || replace(rid::text, '-', '') ELSE reservation_id END) COLLATE "C"`

// ListReservations returns one page of q's matching archived reservations
// in walk order. The tenant leads every condition (its index; one Citus
// worker); a finalized window also bounds the day partitions read.
func (s *Store) ListReservations(ctx context.Context, q ReservationQuery) ([]Reservation, error) {
	if q.Tenant == "" || q.Limit < 1 || q.Limit > 10000 {
		return nil, fmt.Errorf("%w: tenant %q, limit %d", ErrQuery, q.Tenant, q.Limit)
	}
	score := "created_at_ms"
	if q.ByExpiry {
		score = "expires_at_ms"
	}
	args := []any{q.Tenant}
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	where := []string{"tenant_id = $1"}
	if q.State != 0 {
		where = append(where, "state = "+arg(int16(q.State)))
	}
	if q.IdemKey != "" {
		where = append(where, "idem_key = "+arg(q.IdemKey))
	}
	for _, seg := range q.Segments {
		where = append(where, "strpos('/' || scope_path || '/', "+arg("/"+seg+"/")+") > 0")
	}
	window := func(col string, from, to *int64) {
		if from != nil {
			where = append(where, col+" >= "+arg(*from))
		}
		if to != nil {
			where = append(where, col+" <= "+arg(*to))
		}
	}
	window("created_at_ms", q.CreatedFrom, q.CreatedTo)
	window("expires_at_ms", q.ExpiresFrom, q.ExpiresTo)
	if q.FinalizedFrom != nil || q.FinalizedTo != nil {
		// Only committed and released reservations are finalized; their
		// settle time is the finalized time (ms, exact in timestamptz).
		where = append(where, "state IN (1, 2)")
		if q.FinalizedFrom != nil {
			where = append(where, "settled_at >= "+arg(time.UnixMilli(*q.FinalizedFrom).UTC()))
		}
		if q.FinalizedTo != nil {
			where = append(where, "settled_at <= "+arg(time.UnixMilli(*q.FinalizedTo).UTC()))
		}
	}
	dir, cmp := "ASC", ">"
	if q.Desc {
		dir, cmp = "DESC", "<"
	}
	if q.After != nil {
		where = append(where, fmt.Sprintf("(%s, %s) %s (%s, %s COLLATE \"C\")", score, idExpr, cmp, arg(q.After.Score), arg(q.After.ID)))
	}
	sql := `SELECT tenant_id, rid, reservation_id, settled_at, state, unit, scope_path, estimate,
		charged, debt_incurred, created_at_ms, expires_at_ms, grace_ms, ext_count, max_ext, policy, idem_key,
		subject, action, affected, budgeted, metadata, committed_metadata, replay, action_kind, action_name
		FROM cycles_reservations WHERE ` + strings.Join(where, " AND ") +
		fmt.Sprintf(" ORDER BY %s %s, %s %s LIMIT %d", score, dir, idExpr, dir, q.Limit)
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("archive: list reservations: %w", err)
	}
	out, err := pgx.AppendRows([]Reservation(nil), rows, func(row pgx.CollectableRow) (Reservation, error) { return scanReservation(row) })
	if err != nil {
		return nil, fmt.Errorf("archive: list reservations: %w", err)
	}
	return out, nil
}

// scanner is a pgx row (QueryRow or Rows).
type scanner interface{ Scan(dest ...any) error }

// scanReservation reads the columns GetReservation and ListReservations
// select, in their order.
func scanReservation(row scanner) (Reservation, error) {
	var r Reservation
	var state int16
	var rid [16]byte
	var idText string
	var policy, unit int16
	err := row.Scan(&r.TenantID, &rid, &idText, &r.SettledAt, &state, &unit, &r.ScopePath, &r.Estimate,
		&r.Charged, &r.DebtIncurred, &r.CreatedAtMs, &r.ExpiresAtMs, &r.GraceMs, &r.ExtCount, &r.MaxExt,
		&policy, &r.IdemKey, &r.Subject, &r.Action, &r.Affected, &r.Budgeted, &r.Metadata,
		&r.CommittedMetadata, &r.Replay, &r.ActionKind, &r.ActionName)
	if err != nil {
		return Reservation{}, err
	}
	if r.Policy, err = policyCodes.name(policy); err != nil {
		return Reservation{}, fmt.Errorf("policy: %w", err)
	}
	if r.Unit, err = unitCodes.name(unit); err != nil {
		return Reservation{}, fmt.Errorf("unit: %w", err)
	}
	r.ReservationID = decodeID(r.TenantID, rid, idText)
	r.State = State(state)
	r.SettledAt = r.SettledAt.UTC()
	return r, nil
}
