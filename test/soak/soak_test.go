// Package soak runs a sustained mixed workload against a real cyclesd process
// and checks that it stays healthy: flat heap, flat latency, bounded keys, a
// consistent deadline index, and no errors but budget denials. See README.md.
package soak

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/status"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/test/crash/cyclesdtest"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
	"github.com/cyclesgo/cycles-go/test/redistest"
)

var (
	run      = flag.Bool("soak", os.Getenv("CYCLES_SOAK") != "", "run the soak test (make soak; make test runs -soak.duration=60s)")
	duration = flag.Duration("soak.duration", 30*time.Minute, "how long the soak load runs")
	rate     = flag.Int("soak.rate", 150, "target operations per second (every RPC is one operation)")
	workers  = flag.Int("soak.workers", 8, "concurrent clients")
)

var binary string

func TestMain(m *testing.M) {
	flag.Parse()
	redistest.Main(m, redistest.MainOptions{LeakCheck: true, Setup: func() (func(), error) {
		if !*run {
			return nil, nil // TestSoak skips itself
		}
		return cyclesdtest.BuildTemp("cyclesd-soak-", &binary)
	}})
}

// minRate is the floor for the workload.
const minRate = 100

// window is one measurement period.
type window struct {
	from, to  time.Time
	latencies map[string][]time.Duration // by RPC
	heap      []float64                  // go_memory_heap_live_bytes samples
}

func (w *window) all() []time.Duration {
	var out []time.Duration
	for _, l := range w.latencies {
		out = append(out, l...)
	}
	return out
}

func mean(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(q*float64(len(s)-1))]
}

func median(fs []float64) float64 {
	if len(fs) == 0 {
		return 0
	}
	s := append([]float64(nil), fs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// stats collects what the clients saw.
type stats struct {
	mu      sync.Mutex
	start   time.Time
	windows []*window
	ops     atomic.Int64
	reserve atomic.Int64
	denials map[string]int // expected budget denials by reason
	errors  map[string]int // anything else
}

func (s *stats) window(at time.Time) *window {
	for _, w := range s.windows {
		if !at.Before(w.from) && at.Before(w.to) {
			return w
		}
	}
	return nil
}

func (s *stats) record(rpc string, start time.Time, err error, denialOK bool) {
	d := time.Since(start)
	s.ops.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.window(start); w != nil {
		w.latencies[rpc] = append(w.latencies[rpc], d)
	}
	if err == nil {
		return
	}
	code, _, _ := apierr.FromStatus(err)
	switch {
	case denialOK && (code == apierr.BudgetExceeded || code == apierr.OverdraftLimitExceeded):
		s.denials[rpc+" "+string(code)]++
	default:
		s.errors[fmt.Sprintf("%s %s %s", rpc, status.Code(err), code)]++
	}
}

// TestSoak: a mixed workload (reserve then commit, release, extend+commit or
// abandon with a short TTL; direct-debit events; reserves on a tight budget
// that are sometimes denied) at -soak.rate operations per second for
// -soak.duration against a real cyclesd and redis-server. At the end:
//
//	S1 the server's heap after GC (go_memory_heap_live_bytes, median of the
//	   final window) < 2 x the first window's;
//	S2 the final window's mean latency < 3 x the first window's (floored at
//	   1 ms: the reference skips the check below 1 ms as noise);
//	S3 reservation records <= reserves x 1.1 + 10 and idempotency keys <=
//	   operations x 2.1 + 10; every terminal record, idempotency key and event
//	   record carries a TTL; nothing is left ACTIVE once the load stops;
//	S4 every deadline-index entry has its ACTIVE record and every ACTIVE
//	   record its entry (ledgertest.Violations, which also checks the ledger
//	   equation and reserved = sum of ACTIVE estimates);
//	zero errors other than the expected budget denials; >= 100 ops/s achieved.
//
// Windows are one minute, or a quarter of the duration when shorter; the
// first starts after a warm-up of a tenth of the duration (at most 10 s).
func TestSoak(t *testing.T) {
	if !*run {
		t.Skip("soak runs with -soak (make soak: 30 minutes; make test: -soak.duration=60s)")
	}
	if *rate < minRate {
		t.Fatalf("-soak.rate %d is below the %d ops/s the soak must sustain", *rate, minRate)
	}
	srv := redistest.Start(t)
	rc := srv.Client(t)
	d := cyclesdtest.Start(t, binary, srv.Addr, "-sweeper-interval", "1s")
	d.WaitServing(t)
	conn := d.Conn(t)
	const tenant = "soak"
	key := cyclesdtest.Provision(t, conn, tenant,
		cyclesdtest.Budget{Allocated: 1 << 60},
		cyclesdtest.Budget{ScopePath: "tenant:soak/workspace:w", Allocated: 1 << 60},
		cyclesdtest.Budget{ScopePath: "tenant:soak/workspace:w/agent:tight", Allocated: 5_000})
	runtime := cyclesv1.NewRuntimeServiceClient(conn)

	win := time.Minute
	if *duration/4 < win {
		win = *duration / 4
	}
	warmup := *duration / 10
	if warmup > 10*time.Second {
		warmup = 10 * time.Second
	}
	st := &stats{start: time.Now(), denials: map[string]int{}, errors: map[string]int{}}
	end := st.start.Add(warmup + *duration)
	first := &window{from: st.start.Add(warmup), to: st.start.Add(warmup + win), latencies: map[string][]time.Duration{}}
	last := &window{from: end.Add(-win), to: end, latencies: map[string][]time.Duration{}}
	st.windows = []*window{first, last}

	// Heap sampler: every 2 s (and into the two windows).
	heapName := "go_memory_heap_live_bytes"
	var heapMu sync.Mutex
	var heapMax float64
	stopHeap := make(chan struct{})
	heapDone := make(chan struct{})
	go func() {
		defer close(heapDone)
		tk := time.NewTicker(2 * time.Second)
		defer tk.Stop()
		for {
			select {
			case <-stopHeap:
				return
			case <-tk.C:
			}
			v, ok := cyclesdtest.MetricValue(d.Metrics(t), heapName)
			if !ok {
				t.Errorf("/metrics has no %s", heapName)
				return
			}
			now := time.Now()
			heapMu.Lock()
			if v > heapMax {
				heapMax = v
			}
			for _, w := range st.windows {
				if !now.Before(w.from) && now.Before(w.to.Add(time.Second)) {
					w.heap = append(w.heap, v)
				}
			}
			heapMu.Unlock()
		}
	}()

	// One token per operation, at the target rate.
	tokens := make(chan struct{}, *rate)
	stopTokens := make(chan struct{})
	go func() {
		tk := time.NewTicker(time.Second / time.Duration(*rate))
		defer tk.Stop()
		for {
			select {
			case <-stopTokens:
				close(tokens)
				return
			case <-tk.C:
				select {
				case tokens <- struct{}{}:
				default: // workers are behind; the achieved rate shows it
				}
			}
		}
	}()
	var wg sync.WaitGroup
	for w := 0; w < *workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			c := &client{rt: runtime, key: key, st: st, tokens: tokens, id: w,
				rng: rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))}
			for i := 0; c.take(); i++ {
				c.cycle(i)
			}
		}(w)
	}
	t.Logf("soak: %v at %d ops/s (%d workers), windows %v after a %v warm-up", *duration, *rate, *workers, win, warmup)
	time.Sleep(time.Until(end))
	close(stopTokens)
	wg.Wait()
	elapsed := time.Since(st.start.Add(warmup))
	close(stopHeap)
	<-heapDone

	ops, reserves := st.ops.Load(), st.reserve.Load()
	achieved := float64(ops) / time.Since(st.start).Seconds()
	t.Logf("operations %d (%d reserves) in %v: %.1f ops/s", ops, reserves, elapsed.Round(time.Second), achieved)
	if achieved < minRate {
		t.Errorf("achieved %.1f ops/s, below %d", achieved, minRate)
	}

	// S1: heap after GC.
	h0, h1 := median(first.heap), median(last.heap)
	t.Logf("S1 heap after GC: first window %.1f MiB, final window %.1f MiB (x%.2f), max %.1f MiB",
		h0/(1<<20), h1/(1<<20), h1/h0, heapMax/(1<<20))
	if h0 == 0 || h1 >= 2*h0 {
		t.Errorf("S1: heap after GC grew from %.0f to %.0f bytes (limit 2x)", h0, h1)
	}

	// S2: latency.
	base, fin := first.all(), last.all()
	floor := mean(base)
	if floor < time.Millisecond {
		floor = time.Millisecond
	}
	for _, w := range []struct {
		name string
		w    *window
	}{{"first", first}, {"final", last}} {
		all := w.w.all()
		t.Logf("S2 %s window: %d calls, mean %v, p50 %v, p99 %v; reserve mean %v p99 %v", w.name, len(all),
			mean(all).Round(time.Microsecond), quantile(all, 0.5).Round(time.Microsecond), quantile(all, 0.99).Round(time.Microsecond),
			mean(w.w.latencies["reserve"]).Round(time.Microsecond), quantile(w.w.latencies["reserve"], 0.99).Round(time.Microsecond))
	}
	if len(base) < 10 || len(fin) < 10 {
		t.Errorf("S2: too few samples (%d, %d)", len(base), len(fin))
	} else if mean(fin) >= 3*floor {
		t.Errorf("S2: final-window mean latency %v >= 3 x the first window's %v (floored at 1 ms)", mean(fin), mean(base))
	}

	// Errors.
	st.mu.Lock()
	for k, n := range st.errors {
		t.Errorf("unexpected errors: %s x %d", k, n)
	}
	t.Logf("expected denials: %v", st.denials)
	st.mu.Unlock()

	// Quiesce: abandoned reservations (TTL 1 s) are expired by the sweeper.
	ctx := context.Background()
	tn := keys.Tenant(tenant)
	if n, err := ledgertest.AwaitNoneActive(ctx, rc, tenant, 30*time.Second, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	} else if n > 0 {
		t.Errorf("S3: %d reservations still ACTIVE 30 s after the load stopped", n)
	}

	// S3: key counts and TTLs.
	checkKeys(t, rc, tn, ops, reserves)

	// S4 (+ the ledger invariants).
	for _, v := range ledgertest.Violations(ctx, rc, tenant) {
		t.Errorf("S4: %s", v)
	}
}

// checkKeys is S3: bounded key counts, TTLs on everything that must expire.
func checkKeys(t *testing.T, rc *redis.Client, tn keys.Tenant, ops, reserves int64) {
	t.Helper()
	ctx := context.Background()
	pattern := strings.NewReplacer("{", `\{`, "}", `\}`).Replace(tn.Prefix()) + "*"
	var all []string
	it := rc.Scan(ctx, 0, pattern, 5000).Iterator()
	for it.Next(ctx) {
		all = append(all, it.Val())
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	indexes := map[string]bool{tn.Deadlines(): true, tn.Created(): true, tn.Expires(): true}
	var records, idem, evRecords []string
	for _, k := range all {
		switch {
		case strings.HasPrefix(k, tn.Prefix()+"r:") && !indexes[k]:
			records = append(records, k)
		case strings.HasPrefix(k, tn.Prefix()+"idem:"):
			idem = append(idem, k)
		case strings.HasPrefix(k, tn.Prefix()+"ev:"):
			evRecords = append(evRecords, k)
		}
	}
	t.Logf("S3 keys: %d total, %d reservation records (bound %d), %d idempotency keys (bound %d), %d event records",
		len(all), len(records), reserves*11/10+10, len(idem), ops*21/10+10, len(evRecords))
	if int64(len(records)) > reserves*11/10+10 {
		t.Errorf("S3: %d reservation records for %d reserves", len(records), reserves)
	}
	if int64(len(idem)) > ops*21/10+10 {
		t.Errorf("S3: %d idempotency keys for %d operations", len(idem), ops)
	}
	// TTLs, pipelined in chunks.
	states := map[string]int{}
	check := func(ks []string, withState bool) {
		for i := 0; i < len(ks); i += 1000 {
			chunk := ks[i:min(i+1000, len(ks))]
			pipe := rc.Pipeline()
			ttls := make([]*redis.DurationCmd, len(chunk))
			st := make([]*redis.StringCmd, len(chunk))
			for j, k := range chunk {
				ttls[j] = pipe.PTTL(ctx, k)
				if withState {
					st[j] = pipe.HGet(ctx, k, "state")
				}
			}
			if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
				t.Fatal(err)
			}
			for j, k := range chunk {
				ttl := ttls[j].Val()
				if ttl == -2 {
					continue // expired between the SCAN and now: it had a TTL
				}
				state := "-"
				if withState {
					state = st[j].Val()
					states[state]++
				}
				if state == "ACTIVE" {
					t.Errorf("S3: %s is still ACTIVE after the load", k)
					continue
				}
				if ttl < 0 || ttl > time.Duration(keys.TerminalRetentionMs)*time.Millisecond { // -1: no TTL
					t.Errorf("S3: %s (%s) has TTL %v", k, state, ttl)
				}
			}
		}
	}
	check(records, true)
	check(idem, false)
	check(evRecords, false)
	t.Logf("S3 reservation records by state: %v", states)
}

// client is one soak worker.
type client struct {
	rt     cyclesv1.RuntimeServiceClient
	key    string
	st     *stats
	tokens <-chan struct{}
	id     int
	rng    *rand.Rand
}

// take waits for the next operation's token; false once the load stopped.
func (c *client) take() bool {
	_, ok := <-c.tokens
	return ok
}

// pace waits for a token for the next RPC of a cycle already started; once
// the load stopped it returns at once, so every started cycle finishes (no
// reservation is left behind by the stop itself).
func (c *client) pace() { <-c.tokens }

func (c *client) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(cyclesdtest.KeyCtx(context.Background(), c.key), 10*time.Second)
}

// cycle is one unit of the mix; every RPC takes its own token.
func (c *client) cycle(i int) {
	id := fmt.Sprintf("%d-%d", c.id, i)
	roll := c.rng.IntN(100)
	if roll < 20 {
		c.event(id)
		return
	}
	tight := roll < 30
	agent := fmt.Sprintf("a%d", c.id%4)
	est := 100 + c.rng.Int64N(900)
	ttl, grace := int64(60_000), int64(0)
	plan := c.rng.IntN(100)
	if tight {
		agent, est, plan = "tight", 1000+c.rng.Int64N(2000), 50 // tight reserves are always released
	}
	if plan >= 95 {
		ttl = 1000 // abandoned: the sweeper expires it
	}
	ctx, cancel := c.ctx()
	start := time.Now()
	res, err := c.rt.CreateReservation(ctx, &cyclesv1.CreateReservationRequest{
		IdempotencyKey: "r-" + id, Subject: &cyclesv1.Subject{Workspace: "w", Agent: agent},
		Action:   &cyclesv1.Action{Kind: "llm.completion", Name: "m"},
		Estimate: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: est}, TtlMs: &ttl, GracePeriodMs: &grace,
	})
	cancel()
	c.st.reserve.Add(1)
	c.st.record("reserve", start, err, tight)
	if err != nil || plan >= 95 {
		return
	}
	rid := res.GetReservationId()
	if plan >= 80 && plan < 95 { // extend, then commit
		c.pace()
		ctx, cancel := c.ctx()
		start := time.Now()
		_, err := c.rt.ExtendReservation(ctx, &cyclesv1.ExtendReservationRequest{ReservationId: rid, IdempotencyKey: "x-" + id, ExtendByMs: 30_000})
		cancel()
		c.st.record("extend", start, err, false)
	}
	c.pace()
	ctx, cancel = c.ctx()
	defer cancel()
	start = time.Now()
	if plan >= 55 && plan < 80 {
		_, err = c.rt.ReleaseReservation(ctx, &cyclesv1.ReleaseReservationRequest{ReservationId: rid, IdempotencyKey: "l-" + id})
		c.st.record("release", start, err, false)
		return
	}
	actual := est * int64(50+c.rng.IntN(60)) / 100 // below and above the estimate
	_, err = c.rt.CommitReservation(ctx, &cyclesv1.CommitReservationRequest{ReservationId: rid, IdempotencyKey: "c-" + id,
		Actual: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: actual}})
	c.st.record("commit", start, err, false)
}

func (c *client) event(id string) {
	ctx, cancel := c.ctx()
	defer cancel()
	start := time.Now()
	_, err := c.rt.CreateEvent(ctx, &cyclesv1.CreateEventRequest{
		IdempotencyKey: "e-" + id, Subject: &cyclesv1.Subject{Workspace: "w", Agent: fmt.Sprintf("a%d", c.id%4)},
		Action: &cyclesv1.Action{Kind: "tool.call", Name: "search"},
		Actual: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 1 + c.rng.Int64N(200)},
	})
	c.st.record("event", start, err, false)
}
