package archive

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Store is an open archive: a connection pool on a migrated database.
type Store struct {
	pool *pgxpool.Pool

	// mu guards days: the day partitions known to exist, per table.
	mu   sync.Mutex
	days map[string]map[string]bool
}

// Open connects to dsn, checks the server answers and applies the pending
// migrations. It fails when PostgreSQL is unreachable: an operator who
// configured an archive must not get a cyclesd that silently keeps no
// history.
func Open(ctx context.Context, dsn string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("archive: DSN: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("archive: connect: %w", err)
	}
	s := &Store{pool: pool, days: map[string]map[string]bool{}}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("archive: connect: %w", err)
	}
	_, err = Migrate(ctx, conn.Conn())
	conn.Release()
	if err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

// Close releases the pool.
func (s *Store) Close() { s.pool.Close() }

// Ping checks PostgreSQL answers (readiness).
func (s *Store) Ping(ctx context.Context) error { return s.pool.Ping(ctx) }

// SchemaVersion is the version the database is at.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) { return SchemaVersion(ctx, s.pool) }

// ErrFenced refuses a batch from a writer whose lease fence is older than
// the one already recorded for its stream: another replica holds the lease.
var ErrFenced = errors.New("archive: stale lease fence: another replica archives this stream")

// Position is how far a stream has been archived.
type Position struct {
	// Position is opaque to the archive (a Redis stream id, a cursor).
	Position string
	// Fence is the lease generation of the writer that recorded it.
	Fence int64
}

// Position returns the recorded position of stream (zero value: none yet).
func (s *Store) Position(ctx context.Context, stream string) (Position, error) {
	var p Position
	err := s.pool.QueryRow(ctx, "SELECT position, fence FROM cycles_archive_positions WHERE stream = $1", stream).
		Scan(&p.Position, &p.Fence)
	if errors.Is(err, pgx.ErrNoRows) {
		return Position{}, nil
	}
	if err != nil {
		return Position{}, fmt.Errorf("archive: position of %s: %w", stream, err)
	}
	return p, nil
}

// Batch is what one archive step writes: rows and the position after them.
type Batch struct {
	// Stream names the source the position belongs to.
	Stream string
	// Fence is the writer's lease generation (larger after each takeover).
	Fence int64
	// Position is recorded, in the same transaction, as the stream's new
	// position.
	Position     string
	Reservations []Reservation
	Events       []Entry
	Audit        []Entry
	// Feed are entries of the all-tenant feed (TenantID: the tenant whose
	// range the entry announces; ID unused).
	Feed []Entry
}

// Written counts the rows a batch inserted (rows already present are
// skipped, so a replayed batch writes 0).
type Written struct {
	Reservations, Events, Audit, Feed int64
}

// Write stores a batch exactly once: the rows (skipping those already
// present) and the stream position, in one transaction, refused with
// ErrFenced when a newer lease holder has written the stream.
func (s *Store) Write(ctx context.Context, b Batch) (Written, error) {
	var w Written
	if b.Stream == "" {
		return w, errors.New("archive: batch without a stream")
	}
	if err := s.ensureBatchDays(ctx, b); err != nil {
		return w, err
	}
	// Everything between BEGIN and COMMIT goes as one pgx batch: one round
	// trip instead of one per statement. The statements run in order inside
	// the transaction, so the position row is locked before any row is
	// written; the fence is checked once the batch ran, and a fenced batch
	// is rolled back (its writes never commit).
	q := &pgx.Batch{}
	// Create the position row if missing, then lock it: concurrent writers
	// of one stream queue here, and the fence check below sees the winner.
	q.Queue(`INSERT INTO cycles_archive_positions (stream, position, fence)
		VALUES ($1, '', 0) ON CONFLICT (stream) DO NOTHING`, b.Stream)
	var fence int64
	q.Queue("SELECT fence FROM cycles_archive_positions WHERE stream = $1 FOR UPDATE", b.Stream).
		QueryRow(func(row pgx.Row) error { return row.Scan(&fence) })
	if err := queueReservations(q, b.Reservations, &w.Reservations); err != nil {
		return Written{}, err
	}
	if err := queueEntries(q, "cycles_events", "event_id", b.Events, &w.Events); err != nil {
		return Written{}, err
	}
	if err := queueEntries(q, "cycles_audit_entries", "entry_id", b.Audit, &w.Audit); err != nil {
		return Written{}, err
	}
	if err := queueFeed(q, b.Feed, &w.Feed); err != nil {
		return Written{}, err
	}
	// A fenced writer's update changes nothing (and is rolled back anyway).
	q.Queue(`UPDATE cycles_archive_positions SET position = $2, fence = $3, updated_at = now()
		WHERE stream = $1 AND fence <= $3`, b.Stream, b.Position, b.Fence)
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return Written{}, fmt.Errorf("archive: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if err := tx.SendBatch(ctx, q).Close(); err != nil {
		return Written{}, fmt.Errorf("archive: write batch of %s: %w", b.Stream, err)
	}
	if fence > b.Fence {
		return Written{}, ErrFenced
	}
	if err := tx.Commit(ctx); err != nil {
		return Written{}, fmt.Errorf("archive: commit batch: %w", err)
	}
	return w, nil
}

func (s *Store) ensureBatchDays(ctx context.Context, b Batch) error {
	need := map[string][]time.Time{}
	for _, r := range b.Reservations {
		need[tableReservations] = append(need[tableReservations], r.SettledAt)
	}
	for _, e := range b.Events {
		need[tableEvents] = append(need[tableEvents], e.OccurredAt)
	}
	for _, e := range b.Audit {
		need[tableAudit] = append(need[tableAudit], e.OccurredAt)
	}
	for _, e := range b.Feed {
		need[tableFeed] = append(need[tableFeed], e.OccurredAt)
	}
	for table, ts := range need {
		if err := s.ensureDays(ctx, table, ts...); err != nil {
			return err
		}
	}
	return nil
}
