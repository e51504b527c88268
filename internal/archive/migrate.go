package archive

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrationLock is the advisory lock key that serializes migrations between
// replicas starting at once ("cycles" in ASCII).
const migrationLock = 0x6379636c6573

// migration is one numbered SQL file.
type migration struct {
	version int
	name    string
	sql     string
}

// migrations lists the embedded migrations in version order; file names are
// NNNN_name.sql and the numbers run 1, 2, 3... without gaps.
func migrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, e := range entries {
		num, name, ok := strings.Cut(strings.TrimSuffix(e.Name(), ".sql"), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("migration file %q is not NNNN_name.sql", e.Name())
		}
		body, err := migrationFiles.ReadFile("migrations/" + e.Name())
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: v, name: name, sql: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	for i, m := range out {
		if m.version != i+1 {
			return nil, fmt.Errorf("migration %d missing (found %d)", i+1, m.version)
		}
	}
	return out, nil
}

// LatestVersion is the schema version this build writes.
func LatestVersion() int {
	ms, err := migrations()
	if err != nil {
		return 0
	}
	return len(ms)
}

// Migrate brings the schema to LatestVersion: each pending migration runs in
// its own transaction together with its version row, under an advisory lock
// held for the run, so replicas starting at once apply it once. A database already at a newer
// version than this build knows is refused (an older cyclesd must not write
// a schema it does not understand).
func Migrate(ctx context.Context, conn *pgx.Conn) (applied []int, err error) {
	ms, err := migrations()
	if err != nil {
		return nil, err
	}
	// A session lock for the whole run: even creating the version table
	// races between replicas starting at once.
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(migrationLock)); err != nil {
		return nil, fmt.Errorf("archive: migration lock: %w", err)
	}
	defer func() {
		// The lock goes with the session if this fails (connection lost).
		_, _ = conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", int64(migrationLock))
	}()
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS cycles_schema_versions (
		version    integer     PRIMARY KEY,
		name       text        NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return nil, fmt.Errorf("archive: schema version table: %w", err)
	}
	for _, m := range ms {
		done, err := migrateOne(ctx, conn, m, len(ms))
		if err != nil {
			return applied, err
		}
		if done {
			applied = append(applied, m.version)
		}
	}
	return applied, nil
}

func migrateOne(ctx context.Context, conn *pgx.Conn, m migration, latest int) (bool, error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("archive: migration %d: %w", m.version, err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var current int
	if err := tx.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM cycles_schema_versions").Scan(&current); err != nil {
		return false, fmt.Errorf("archive: schema version: %w", err)
	}
	if current > latest {
		return false, fmt.Errorf("archive: the database schema is at version %d, newer than this cyclesd knows (%d): upgrade cyclesd", current, latest)
	}
	if current >= m.version {
		return false, nil
	}
	if _, err := tx.Exec(ctx, m.sql); err != nil {
		return false, fmt.Errorf("archive: migration %d (%s): %w", m.version, m.name, err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO cycles_schema_versions (version, name) VALUES ($1, $2)", m.version, m.name); err != nil {
		return false, fmt.Errorf("archive: record migration %d: %w", m.version, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("archive: commit migration %d: %w", m.version, err)
	}
	return true, nil
}

// SchemaVersion is the version the database is at (0: empty).
func SchemaVersion(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (int, error) {
	var exists bool
	if err := q.QueryRow(ctx, "SELECT to_regclass('cycles_schema_versions') IS NOT NULL").Scan(&exists); err != nil || !exists {
		return 0, err
	}
	var v int
	err := q.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM cycles_schema_versions").Scan(&v)
	return v, err
}
