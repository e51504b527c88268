package archive

import (
	"context"
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"time"
)

// UsageQuery selects a usage report over the archived reservations.
type UsageQuery struct {
	Tenant string
	// From (inclusive) and To (exclusive) bound settled_at.
	From, To time.Time
	// Hourly buckets, else daily (UTC).
	Hourly bool
	// ScopePrefix, when set, keeps scopes equal to it or under it.
	ScopePrefix string
	// Depth > 0 groups by the scope path's first Depth segments.
	Depth int
	// Unit, when set, keeps that unit only.
	Unit string
}

// UsageRow sums one bucket, scope prefix and unit. Amounts are exact:
// PostgreSQL sums in numeric, and a sum past int64 is an error, never
// rounded.
type UsageRow struct {
	Bucket                                       time.Time
	Scope, Unit                                  string
	Reserved, Committed, Released, Expired, Debt int64
	Reservations, Commits, Releases, Expirations int64
}

// ErrUsageOverflow refuses a report whose sum does not fit int64.
var ErrUsageOverflow = fmt.Errorf("%w: a usage sum exceeds int64; narrow the range or the scope", ErrQuery)

// Usage sums tenant's settled reservations per bucket, scope prefix and
// unit, in that order. It reads only the range's day partitions of one
// tenant (one Citus worker).
func (s *Store) Usage(ctx context.Context, q UsageQuery) ([]UsageRow, error) {
	if q.Tenant == "" || !q.From.Before(q.To) || q.Depth < 0 {
		return nil, fmt.Errorf("%w: usage of %q", ErrQuery, q.Tenant)
	}
	args := []any{q.Tenant, q.From.UTC(), q.To.UTC()}
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	width := "day"
	if q.Hourly {
		width = "hour"
	}
	scope := "scope_path"
	if q.Depth > 0 {
		scope = fmt.Sprintf("array_to_string((string_to_array(scope_path, '/'))[1:%d], '/')", q.Depth)
	}
	where := "tenant_id = $1 AND settled_at >= $2 AND settled_at < $3"
	if q.ScopePrefix != "" {
		where += fmt.Sprintf(" AND (scope_path = %s OR left(scope_path, %d) = %s)", arg(q.ScopePrefix),
			len(q.ScopePrefix)+1, arg(q.ScopePrefix+"/"))
	}
	if q.Unit != "" {
		code, ok := UnitCode(q.Unit)
		if !ok {
			return nil, nil // no row has a unit the column cannot hold
		}
		where += " AND unit = " + arg(code)
	}
	sql := fmt.Sprintf(`SELECT date_trunc('%s', settled_at AT TIME ZONE 'UTC') AS bucket, %s AS scope, %s AS unit,
		coalesce(sum(estimate), 0)::text,
		coalesce(sum(charged) FILTER (WHERE state = 1), 0)::text,
		coalesce(sum(estimate) FILTER (WHERE state = 2), 0)::text,
		coalesce(sum(estimate) FILTER (WHERE state = 3), 0)::text,
		coalesce(sum(debt_incurred), 0)::text,
		count(*), count(*) FILTER (WHERE state = 1), count(*) FILTER (WHERE state = 2), count(*) FILTER (WHERE state = 3)
		FROM cycles_reservations WHERE %s GROUP BY 1, 2, 3 ORDER BY 1, 2, 3`, width, scope, unitCodes.sqlName("unit"), where)
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("archive: usage: %w", err)
	}
	defer rows.Close()
	var out []UsageRow
	for rows.Next() {
		var r UsageRow
		var sums [5]string
		if err := rows.Scan(&r.Bucket, &r.Scope, &r.Unit, &sums[0], &sums[1], &sums[2], &sums[3], &sums[4],
			&r.Reservations, &r.Commits, &r.Releases, &r.Expirations); err != nil {
			return nil, fmt.Errorf("archive: usage: %w", err)
		}
		for i, dst := range []*int64{&r.Reserved, &r.Committed, &r.Released, &r.Expired, &r.Debt} {
			if *dst, err = exactInt64(sums[i]); err != nil {
				return nil, err
			}
		}
		r.Bucket = time.Date(r.Bucket.Year(), r.Bucket.Month(), r.Bucket.Day(), r.Bucket.Hour(), 0, 0, 0, time.UTC)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("archive: usage: %w", err)
	}
	return out, nil
}

// exactInt64 reads a numeric sum rendered as text: an integer in int64, or
// ErrUsageOverflow.
func exactInt64(s string) (int64, error) {
	n, ok := new(big.Int).SetString(strings.TrimSpace(s), 10)
	if !ok {
		return 0, fmt.Errorf("archive: usage: sum %q is not an integer", s)
	}
	if !n.IsInt64() {
		return 0, ErrUsageOverflow
	}
	return n.Int64(), nil
}

// deniedMarker is how a reservation.denied event's type field reads in an
// archived entry's body (EncodeEntry: length-prefixed strings).
var deniedMarker = append(append([]byte{4}, "type"...), append([]byte{byte(len("reservation.denied"))}, "reservation.denied"...)...)

// Denials calls fn with each archived reservation.denied event of tenant
// that occurred in [from, to), oldest first, streaming (no bound on the
// count in memory).
func (s *Store) Denials(ctx context.Context, tenant string, from, to time.Time, fn func(Entry) error) error {
	rows, err := s.pool.Query(ctx, `SELECT tenant_id, occurred_at, seq, false, body FROM cycles_events
		WHERE tenant_id = $1 AND occurred_at >= $2 AND occurred_at < $3 AND position($4::bytea IN body) > 0
		ORDER BY occurred_at, seq`, tenant, from.UTC(), to.UTC(), deniedMarker)
	if err != nil {
		return fmt.Errorf("archive: denials: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		e, err := scanEntry(rows)
		if err != nil {
			return fmt.Errorf("archive: denials: %w", err)
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("archive: denials: %w", err)
	}
	return nil
}
