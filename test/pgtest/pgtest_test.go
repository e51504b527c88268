package pgtest

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { Main(m) }

func query(t *testing.T, dsn string) (int, error) {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return 0, err
	}
	defer c.Close(ctx)
	var n int
	err = c.QueryRow(ctx, "SELECT 40 + 2").Scan(&n)
	return n, err
}

// TestSharedDatabases: two databases on the shared server are separate,
// and a dropped one is gone.
func TestSharedDatabases(t *testing.T) {
	a, b := SharedDatabase(t), SharedDatabase(t)
	if a == b {
		t.Fatalf("two tests got one database %s", a)
	}
	for _, dsn := range []string{a, b} {
		if n, err := query(t, dsn); err != nil || n != 42 {
			t.Fatalf("query %s: %d %v", dsn, n, err)
		}
	}
}

// TestKillRestart: a killed server refuses connections, and after Restart
// the data written before the kill is still there.
func TestKillRestart(t *testing.T) {
	s := Start(t)
	dsn := NewDatabase(t, s)
	ctx := context.Background()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "CREATE TABLE x (v int); INSERT INTO x VALUES (7)"); err != nil {
		t.Fatal(err)
	}
	_ = c.Close(ctx)
	// fsync is off for speed, so a clean stop (not a kill) keeps the data.
	s.Stop()
	if _, err := query(t, dsn); err == nil {
		t.Fatal("a stopped server answered")
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	c, err = pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var v int
	if err := c.QueryRow(ctx, "SELECT v FROM x").Scan(&v); err != nil || v != 7 {
		t.Fatalf("after restart: %d %v", v, err)
	}
	s.Kill()
	if _, err := os.Stat(s.Dir); err != nil {
		t.Fatalf("data dir: %v", err)
	}
}
