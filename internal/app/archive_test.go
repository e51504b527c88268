package app

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cyclesgo/cycles-go/test/errtest"

	"go.uber.org/zap"

	"github.com/cyclesgo/cycles-go/internal/archive"
	"github.com/cyclesgo/cycles-go/internal/config"
	"github.com/cyclesgo/cycles-go/test/pgtest"
	"github.com/cyclesgo/cycles-go/test/redistest"
	"github.com/cyclesgo/cycles-go/test/scripttest"
)

// TestOpenArchive: without a DSN nothing is opened; with one the schema is
// migrated and today's partitions exist before cyclesd serves, and the
// upkeep and archiver workers stop with their context; an
// unreachable or malformed DSN fails the start.
func TestOpenArchive(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ex := scripttest.On(t, redistest.Embedded(t))
	deadPort := redistest.FreePort(t)
	cases := []struct {
		name    string
		dsn     string
		wantErr string
	}{
		{"off", "", ""},
		{"on", pgtest.SharedDatabase(t), ""},
		{"unreachable", fmt.Sprintf("postgres://cycles@127.0.0.1:%d/x?sslmode=disable&connect_timeout=2", deadPort), "-archive-dsn"},
		{"malformed", "postgres://%zz", "-archive-dsn"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &config.Config{ArchiveDSN: tc.dsn, ArchiveRetention: 400 * 24 * time.Hour, HotRetention: time.Hour}
			st, workers, warn, err := openArchive(ctx, cfg, zap.NewNop(), nil, ex)
			if errtest.Want(t, err, tc.wantErr) {
				return
			}
			if tc.dsn == "" {
				if st != nil || workers != nil || warn != nil {
					t.Fatal("an archive was opened without a DSN")
				}
				return
			}
			defer st.Close()
			if v, err := st.SchemaVersion(ctx); err != nil || v != archive.LatestVersion() {
				t.Fatalf("schema version %d %v", v, err)
			}
			parts, err := st.DayPartitions(ctx)
			if err != nil || len(parts) == 0 {
				t.Fatalf("no day partitions after start: %v %v", parts, err)
			}
			if w := warn(); len(w) != 0 {
				t.Fatalf("warnings before any round: %v", w)
			}
			wctx, wcancel := context.WithCancel(ctx)
			wcancel()
			if len(workers) != 2 {
				t.Fatalf("%d workers, want the upkeep and the archiver", len(workers))
			}
			for _, w := range workers {
				if err := w(wctx); err != nil {
					t.Fatalf("archive worker: %v", err)
				}
			}
		})
	}
}
