package archive

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// StreamID is a Redis stream id: ms and sequence.
type StreamID struct {
	MS  int64
	Seq int64
}

// EntryQuery selects archived entries of one stream in stream order.
type EntryQuery struct {
	// Audit reads cycles_audit_entries, else cycles_events.
	Audit bool
	// Feed reads the all-tenant feed (cycles_feed; Tenant, Audit and
	// Global unused).
	Feed bool
	// Global reads the global audit log (its entries under any tenant);
	// else Tenant's own stream.
	Global bool
	Tenant string
	// Lo and Hi bound the stream ids, inclusive (nil: open).
	Lo, Hi *StreamID
	// Desc reads newest first.
	Desc  bool
	Limit int
}

// ListEntries returns up to q.Limit archived entries of a stream in stream
// id order: the rows as written (Seq and the body's stream id agree).
func (s *Store) ListEntries(ctx context.Context, q EntryQuery) ([]Entry, error) {
	if q.Limit < 1 || q.Limit > 10000 || (!q.Feed && !q.Global && q.Tenant == "") || (q.Global && !q.Audit) {
		return nil, fmt.Errorf("%w: entries of %q, limit %d", ErrQuery, q.Tenant, q.Limit)
	}
	table := tableEvents
	if q.Audit {
		table = tableAudit
	}
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	var where []string
	switch {
	case q.Feed:
		table = tableFeed
		where = append(where, "true")
	case q.Global:
		where = append(where, "global")
	case q.Audit:
		where = append(where, "tenant_id = "+arg(q.Tenant), "NOT global")
	default:
		where = append(where, "tenant_id = "+arg(q.Tenant))
	}
	if q.Lo != nil {
		where = append(where, fmt.Sprintf("(occurred_at, seq) >= (%s, %s)", arg(time.UnixMilli(q.Lo.MS).UTC()), arg(q.Lo.Seq)))
	}
	if q.Hi != nil {
		where = append(where, fmt.Sprintf("(occurred_at, seq) <= (%s, %s)", arg(time.UnixMilli(q.Hi.MS).UTC()), arg(q.Hi.Seq)))
	}
	globalCol := "false"
	if q.Audit {
		globalCol = "global"
	}
	dir := "ASC"
	if q.Desc {
		dir = "DESC"
	}
	rows, err := s.pool.Query(ctx, fmt.Sprintf(`SELECT tenant_id, occurred_at, seq, %s, body FROM %s WHERE %s
		ORDER BY occurred_at %s, seq %s LIMIT %d`, globalCol, table, strings.Join(where, " AND "), dir, dir, q.Limit), args...)
	if err != nil {
		return nil, fmt.Errorf("archive: list %s: %w", table, err)
	}
	return collectEntries(rows, table)
}

func collectEntries(rows pgx.Rows, table string) ([]Entry, error) {
	out, err := pgx.AppendRows([]Entry(nil), rows, func(row pgx.CollectableRow) (Entry, error) { return scanEntry(row) })
	if err != nil {
		return nil, fmt.Errorf("archive: read %s: %w", table, err)
	}
	return out, nil
}

// scanEntry reads the columns every entry query selects, in their order:
// tenant_id, occurred_at, seq, global, body.
func scanEntry(row scanner) (Entry, error) {
	var e Entry
	if err := row.Scan(&e.TenantID, &e.OccurredAt, &e.Seq, &e.Global, &e.Body); err != nil {
		return Entry{}, err
	}
	e.OccurredAt = e.OccurredAt.UTC()
	return e, nil
}

// GetEvent returns the archived event id of tenant (false: not archived,
// or its day was dropped).
func (s *Store) GetEvent(ctx context.Context, tenant, id string) (Entry, bool, error) {
	rows, err := s.pool.Query(ctx, `SELECT tenant_id, occurred_at, seq, false, body FROM cycles_events
		WHERE tenant_id = $1 AND event_id = $2 ORDER BY occurred_at LIMIT 1`, tenant, id)
	if err != nil {
		return Entry{}, false, fmt.Errorf("archive: get event %s: %w", id, err)
	}
	es, err := collectEntries(rows, tableEvents)
	if err != nil || len(es) == 0 {
		return Entry{}, false, err
	}
	es[0].ID = id
	return es[0], true, nil
}

// ParseStreamID reads "<ms>-<seq>" (a bare "<ms>" is seq 0, or the largest
// seq when high); a seq past int64 is clamped (no stream reaches it).
func ParseStreamID(s string, high bool) (StreamID, error) {
	msPart, seqPart, hasSeq := strings.Cut(s, "-")
	ms, err := strconv.ParseUint(msPart, 10, 63)
	if err != nil {
		return StreamID{}, errors.New("archive: stream id " + strconv.Quote(s))
	}
	id := StreamID{MS: int64(ms)}
	switch {
	case !hasSeq && high:
		id.Seq = math.MaxInt64
	case hasSeq:
		seq, err := strconv.ParseUint(seqPart, 10, 64)
		if err != nil {
			return StreamID{}, errors.New("archive: stream id " + strconv.Quote(s))
		}
		id.Seq = int64(min(seq, math.MaxInt64))
	}
	return id, nil
}
