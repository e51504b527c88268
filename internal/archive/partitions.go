package archive

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The partitioned history tables.
const (
	tableReservations = "cycles_reservations"
	tableEvents       = "cycles_events"
	tableAudit        = "cycles_audit_entries"
	tableFeed         = "cycles_feed"
)

// Tables lists the partitioned history tables.
var historyTables = []string{tableReservations, tableEvents, tableAudit, tableFeed}

// partitionLock serializes partition DDL between replicas.
const partitionLock = migrationLock + 1

const dayLayout = "20060102"

// partitionName is table_pYYYYMMDD for the UTC day of t.
func partitionName(table string, day time.Time) string {
	return table + "_p" + day.UTC().Format(dayLayout)
}

func utcDay(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
}

// EnsureDays creates the day partitions of every history table that cover
// from .. to (inclusive days), e.g. today and tomorrow ahead of traffic.
func (s *Store) EnsureDays(ctx context.Context, from, to time.Time) error {
	var days []time.Time
	for d := utcDay(from); !d.After(utcDay(to)); d = d.AddDate(0, 0, 1) {
		days = append(days, d)
	}
	for _, table := range historyTables {
		if err := s.ensureDays(ctx, table, days...); err != nil {
			return err
		}
	}
	return nil
}

// ensureDays creates the missing day partitions of table covering ts.
func (s *Store) ensureDays(ctx context.Context, table string, ts ...time.Time) error {
	var missing []time.Time
	s.mu.Lock()
	known := s.days[table]
	if known == nil {
		known = map[string]bool{}
		s.days[table] = known
	}
	seen := map[string]bool{}
	for _, t := range ts {
		d := utcDay(t)
		name := partitionName(table, d)
		if !known[name] && !seen[name] {
			seen[name] = true
			missing = append(missing, d)
		}
	}
	s.mu.Unlock()
	if len(missing) == 0 {
		return nil
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(partitionLock)); err != nil {
			return err
		}
		for _, d := range missing {
			_, err := tx.Exec(ctx, fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s PARTITION OF %s FOR VALUES FROM ('%s') TO ('%s')`,
				partitionName(table, d), table, d.Format(time.DateOnly), d.AddDate(0, 0, 1).Format(time.DateOnly)))
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("archive: create day partitions of %s: %w", table, err)
	}
	s.mu.Lock()
	for _, d := range missing {
		known[partitionName(table, d)] = true
	}
	s.mu.Unlock()
	return nil
}

// DropBefore drops, in every history table, the day partitions that end at
// or before cutoff's day (whole days only: no row is deleted), and returns
// their names. cutoff is now (Redis TIME) minus -archive-retention.
func (s *Store) DropBefore(ctx context.Context, cutoff time.Time) ([]string, error) {
	limit := utcDay(cutoff)
	var dropped []string
	for _, table := range historyTables {
		parts, err := s.partitions(ctx, table)
		if err != nil {
			return dropped, err
		}
		for _, p := range parts {
			day, err := time.Parse(dayLayout, strings.TrimPrefix(p, table+"_p"))
			if err != nil || day.AddDate(0, 0, 1).After(limit) {
				continue // not ours, or not wholly past the retention
			}
			if _, err := s.pool.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{p}.Sanitize()); err != nil {
				return dropped, fmt.Errorf("archive: drop %s: %w", p, err)
			}
			s.mu.Lock()
			delete(s.days[table], p)
			s.mu.Unlock()
			dropped = append(dropped, p)
		}
	}
	return dropped, nil
}

// partitions lists the partitions of table, oldest first.
func (s *Store) partitions(ctx context.Context, table string) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT c.relname FROM pg_inherits i
		JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent
		WHERE p.relname = $1 ORDER BY c.relname`, table)
	if err != nil {
		return nil, fmt.Errorf("archive: partitions of %s: %w", table, err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("archive: partitions of %s: %w", table, err)
	}
	return names, nil
}

// DayPartitions lists the day partitions of every history table.
func (s *Store) DayPartitions(ctx context.Context) ([]string, error) {
	var out []string
	for _, table := range historyTables {
		parts, err := s.partitions(ctx, table)
		if err != nil {
			return nil, err
		}
		out = append(out, parts...)
	}
	return out, nil
}
