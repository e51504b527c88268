package archiver

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/cyclesgo/cycles-go/internal/archive"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
	"github.com/cyclesgo/cycles-go/test/pgtest"
	"github.com/cyclesgo/cycles-go/test/redistest"
	"github.com/cyclesgo/cycles-go/test/scripttest"
)

// TestMaintainerOnce: on every backend, a round makes today's and
// tomorrow's partitions by Redis TIME, drops the days wholly past the
// retention and keeps the last day inside it.
func TestMaintainerOnce(t *testing.T) {
	ctx := context.Background()
	const retention = 10 * 24 * time.Hour
	for _, b := range redistest.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ex := scripttest.New(t, b)
			st, err := archive.Open(ctx, pgtest.SharedDatabase(t))
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			m := NewMaintainer(ex, st, Options{Retention: retention})
			// The round reads Redis TIME again: both reads on one UTC day, or
			// the retention's cutoff day moves and the edge day is dropped.
			ledgertest.ClearOfBoundary(t, b.Client, 24*time.Hour, 30*time.Second)
			now, err := m.Now(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if d := time.Since(now); d > time.Minute || d < -time.Minute {
				t.Fatalf("Redis TIME %v is not this host's clock", now)
			}
			old := now.Add(-retention).AddDate(0, 0, -1) // wholly past the retention
			edge := now.Add(-retention)                  // the cutoff's own day stays
			if err := st.EnsureDays(ctx, old, edge); err != nil {
				t.Fatal(err)
			}
			dropped, err := m.Once(ctx)
			if err != nil {
				t.Fatal(err)
			}
			name := func(d time.Time) string { return "cycles_reservations_p" + d.UTC().Format("20060102") }
			if !slices.Contains(dropped, name(old)) || slices.Contains(dropped, name(edge)) {
				t.Fatalf("dropped %v", dropped)
			}
			parts, err := st.DayPartitions(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []time.Time{now, now.Add(24 * time.Hour), edge} {
				if !slices.Contains(parts, name(want)) {
					t.Fatalf("no partition %s in %v", name(want), parts)
				}
			}
			if slices.Contains(parts, name(old)) {
				t.Fatalf("%s survived", name(old))
			}
		})
	}
}

// TestMaintainerRunStops: Run survives a failed round (PostgreSQL gone)
// and returns when its context ends.
func TestMaintainerRunStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	ex := scripttest.On(t, redistest.Embedded(t))
	srv := pgtest.Start(t)
	st, err := archive.Open(ctx, pgtest.NewDatabase(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	srv.Kill()
	m := NewMaintainer(ex, st, Options{Retention: time.Hour, Interval: time.Millisecond})
	if _, err := m.Once(ctx); err == nil {
		t.Fatal("a round against a dead PostgreSQL succeeded")
	}
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
