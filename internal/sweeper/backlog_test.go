package sweeper

import (
	"context"
	"runtime"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/cyclesgo/cycles-go/internal/telemetry/telemetrytest"
	"github.com/cyclesgo/cycles-go/test/redistest"
)

// Property 3: a backlog of 100,000 due reservations (10 tenants x 10,000, 3
// budgeted scopes each) drains in one sweep, batch after batch, with the
// sweeper's memory bounded by one batch: the script returns counts, not
// candidates, so the Go side never holds more than one batch's reply.
// Reference design: 1,000 per 5 s, about 9 minutes; target <= 15 s.
func TestBacklogDrain100k(t *testing.T) {
	if testing.Short() {
		t.Skip("seeds 100,000 reservations")
	}
	srv := redistest.Start(t)
	c := srv.Client(t)
	seedStart := time.Now()
	var tenants []*seeded
	for i := 0; i < 10; i++ {
		tenants = append(tenants, seedDue(t, c, 10_000, 9))
	}
	t.Logf("seeded 100,000 due reservations in %v", time.Since(seedStart).Round(time.Millisecond))

	m := telemetrytest.New()
	sw := newSweeper(t, c, Options{MeterProvider: m.Provider})
	// The bound is on what the sweeper keeps, not on garbage waiting for a
	// collection (how much waits depends on the GC's pace, and so on the
	// machine's load): the sampler collects, then reads the live heap that
	// collection marked, so a sweeper holding its candidates shows.
	runtime.GC()
	base := heapBytes()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	peak := base
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				runtime.GC()
				if h := heapBytes(); h > peak {
					peak = h
				}
			}
		}
	})
	start := time.Now()
	got, err := sw.SweepOnce(context.Background())
	elapsed := time.Since(start)
	close(stop)
	wg.Wait()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if got.Expired != 100_000 {
		t.Fatalf("expired %d", got.Expired)
	}
	batches := m.Sum(t, "cycles.sweeper.batches")
	allocPerBatch := (after.TotalAlloc - before.TotalAlloc) / uint64(batches)
	growth := int64(peak) - int64(base)
	t.Logf("drained 100,000 in %v (%.0f/s) over %d batches of <= %d; live heap growth peak %d KiB over %d collections; %d KiB allocated per batch; GOMAXPROCS=%d",
		elapsed.Round(time.Millisecond), 100_000/elapsed.Seconds(), batches, sw.opts.BatchSize, growth/1024, after.NumGC-before.NumGC, allocPerBatch/1024, runtime.GOMAXPROCS(0))

	// Holding the 100,000 candidates (ids alone) would need about 4 MiB, and
	// returning them ~100 KiB of allocation per batch.
	if gcs := after.NumGC - before.NumGC; gcs < 3 {
		t.Fatalf("%d collections during the drain: too few to see what the sweeper keeps", gcs)
	}
	if growth > 2<<20 {
		t.Errorf("live heap grew by %d KiB during the drain; want bounded by one batch", growth/1024)
	}
	if allocPerBatch > 64<<10 {
		t.Errorf("%d KiB allocated per batch; want a batch reply's worth", allocPerBatch/1024)
	}
	if n := m.Sum(t, "cycles.sweeper.outcomes", attribute.String("outcome", OutcomeExpired)); n != 100_000 {
		t.Fatalf("expired counter %d", n)
	}
	for _, s := range tenants {
		s.checkAllExpired(t)
	}
}

// heapBytes is the live heap the last GC marked.
func heapBytes() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// BenchmarkExpireBatch measures the drain of 1,000 due reservations on 3
// budgeted scopes, with their events, on a real Redis, in calls of the
// default batch size and time budget (ns/op is per 1,000; calls/op says how
// many calls the time budget split them into).
func BenchmarkExpireBatch(b *testing.B) {
	c := redistest.Start(b).Client(b)
	m := telemetrytest.New()
	sw := newSweeper(b, c, Options{MeterProvider: m.Provider})
	batch := sw.opts.BatchSize
	for b.Loop() {
		b.StopTimer()
		s := seedDue(b, c, batch, 1)
		b.StartTimer()
		got, _, err := sw.drain(context.Background(), s.tenant, false, false)
		if err != nil || got.Expired != int64(batch) {
			b.Fatalf("%+v %v", got, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(batch), "µs/reservation")
	b.ReportMetric(float64(m.Sum(b, "cycles.sweeper.batches"))/float64(b.N), "calls/op")
}
