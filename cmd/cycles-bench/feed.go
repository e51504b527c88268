package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/script"
)

// FeedResult is the outcome of `cycles-bench feed`: one all-tenant
// subscriber (admin key, no tenant_id, event_types reservation.expired)
// watching the expiry of a backlog spread over many tenants, then the cost
// of the feed while thousands of tenants are idle (internal/events/doc.go).
type FeedResult struct {
	Tenants     int `json:"tenants"`
	Expirations int `json:"expirations"`
	// Live: the subscriber is caught up when one TriggerSweep expires the
	// whole backlog.
	SweepS          float64 `json:"sweep_s"`
	SweepRetries    int     `json:"sweep_retries"`
	Delivered       int64   `json:"delivered"`
	Duplicates      int64   `json:"duplicates"`
	LiveRate        float64 `json:"live_events_per_s"`
	LatencyP50Ms    int64   `json:"expiry_to_delivery_p50_ms"`
	LatencyP99Ms    int64   `json:"expiry_to_delivery_p99_ms"`
	LatencyMaxMs    int64   `json:"expiry_to_delivery_max_ms"`
	CyclesdCPUSweep float64 `json:"cyclesd_cpu_s_during_sweep"`
	RedisCPUSweep   float64 `json:"redis_cpu_s_during_sweep"`
	// Replay: a second subscriber reads the same events from the oldest
	// retained entry (the delivery capacity, no longer paced by the sweep).
	ReplayS          float64 `json:"replay_s"`
	ReplayRate       float64 `json:"replay_events_per_s"`
	CyclesdCPUReplay float64 `json:"cyclesd_cpu_s_during_replay"`
	RedisCPUReplay   float64 `json:"redis_cpu_s_during_replay"`
	ClientCPUReplay  float64 `json:"subscriber_cpu_s_during_replay"`
	// Idle: IdleTenants more tenants exist, nothing happens; commands per
	// second Redis processed with the subscriber connected and without it.
	// Reconnects: streams the subscribers resumed from their cursor after an
	// error (e.g. UNAVAILABLE when a Redis read timed out on a busy machine).
	Reconnects           int64   `json:"reconnects"`
	IdleTenants          int     `json:"idle_tenants"`
	IdleWindowS          float64 `json:"idle_window_s"`
	IdleCmdsWithSub      float64 `json:"idle_redis_cmds_per_s_with_subscriber"`
	IdleCmdsWithoutSub   float64 `json:"idle_redis_cmds_per_s_without_subscriber"`
	IdleCyclesdCPUPct    float64 `json:"idle_cyclesd_cpu_pct_with_subscriber"`
	IdleRedisCPUPct      float64 `json:"idle_redis_cpu_pct_with_subscriber"`
	IdleCmdsFromFeed     float64 `json:"idle_redis_cmds_per_s_from_feed"`
	ReconcileXrevrangePS float64 `json:"reconcile_xrevrange_per_s_design"`
}

func feedMain(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("cycles-bench feed", flag.ContinueOnError)
	tenants := fs.Int("tenants", 1000, "tenants the backlog is spread over")
	expirations := fs.Int("expirations", 100_000, "reservations that expire in one sweep")
	idle := fs.Int("idle-tenants", 10_000, "tenants that exist but do nothing during the idle window")
	window := fs.Duration("idle-window", 20*time.Second, "idle measurement window (each, with and without the subscriber)")
	var tf toolFlags
	tf.register(fs, "bench/results/feed.json")
	redisAddr := fs.String("redis-addr", "", "target this Redis (default: start a private redis-server)")
	profile := fs.String("profile-out", "", "CPU-profile cyclesd (serve mode) during the replay into this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg := &config{adminKey: defaultAdminKey, cyclesdBin: tf.bin, allocated: 1_000_000_000_000, redisAddr: *redisAddr, profileOut: *profile}
	if *profile != "" {
		cfg.profileCell = "feed/replay"
	}
	b, cleanup, err := startTool(ctx, cfg, tf.quiet)
	if err != nil {
		return err
	}
	defer cleanup()
	res, err := b.runFeed(ctx, *tenants, *expirations, *idle, *window)
	if err != nil {
		return err
	}
	if err := saveResult(tf.out, res); err != nil {
		return err
	}
	if res.Duplicates > 0 || res.Delivered != int64(res.Expirations) {
		return fmt.Errorf("delivered %d of %d expirations, %d twice", res.Delivered, res.Expirations, res.Duplicates)
	}
	return nil
}

// forEach runs fn(i) for i in [0, n) on workers goroutines; first error wins.
func forEach(n, workers int, fn func(i int) error) error {
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// feedWatcher counts the reservation.expired events of this run on one
// all-tenant stream.
type feedWatcher struct {
	prefix     string
	mu         sync.Mutex
	seen       map[string]bool
	lat        []int64
	dups       int64
	first      time.Time
	last       time.Time
	delivered  atomic.Int64
	reconnects atomic.Int64
}

// watchFeed runs one all-tenant subscriber as a client should: on an error
// it resumes from the cursor of the last event (or heartbeat) it processed.
func (b *runner) watchFeed(ctx context.Context, start cyclesv1.StartPosition, w *feedWatcher) (func() error, error) {
	events := cyclesv1.NewEventServiceClient(b.adminConn)
	open := func(start cyclesv1.StartPosition, cursor string) (cyclesv1.EventService_WatchEventsClient, error) {
		return events.WatchEvents(b.adminCtx(ctx), &cyclesv1.WatchEventsRequest{
			EventTypes: []string{"reservation.expired"}, Start: start, Cursor: cursor})
	}
	s, err := open(start, "")
	if err != nil {
		return nil, err
	}
	errc := make(chan error, 1)
	go func() {
		cursor := ""
		for {
			m, err := s.Recv()
			if err != nil {
				if ctx.Err() != nil || w.reconnects.Add(1) > 100 {
					errc <- err
					return
				}
				time.Sleep(100 * time.Millisecond)
				if cursor != "" {
					s, err = open(cyclesv1.StartPosition_START_POSITION_CURSOR, cursor)
				} else {
					s, err = open(start, "")
				}
				if err != nil {
					errc <- err
					return
				}
				continue
			}
			if hb := m.GetHeartbeat(); hb != nil {
				cursor = hb.GetCursor()
			}
			e := m.GetEvent()
			if e == nil {
				continue
			}
			cursor = e.GetCursor()
			if !strings.HasPrefix(e.GetTenantId(), w.prefix) {
				continue
			}
			now := time.Now()
			id := e.GetData().GetFields()["reservation_id"].GetStringValue()
			w.mu.Lock()
			if w.seen[id] {
				w.dups++
			} else {
				w.seen[id] = true
				w.lat = append(w.lat, now.UnixMilli()-e.GetTimestampMs())
			}
			if w.first.IsZero() {
				w.first = now
			}
			w.last = now
			w.mu.Unlock()
			w.delivered.Add(1)
		}
	}()
	return func() error {
		select {
		case err := <-errc:
			return err
		default:
			return nil
		}
	}, nil
}

func (w *feedWatcher) waitFor(ctx context.Context, n int64, failed func() error) error {
	for w.delivered.Load() < n {
		if err := failed(); err != nil {
			return fmt.Errorf("subscriber: %w", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("subscriber got %d of %d: %w", w.delivered.Load(), n, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

func (b *runner) runFeed(ctx context.Context, nTenants, nExp, nIdle int, window time.Duration) (*FeedResult, error) {
	res := &FeedResult{Tenants: nTenants, Expirations: nExp, IdleTenants: nIdle, IdleWindowS: window.Seconds()}
	prefix := "bench-" + b.runID + "-feed-"
	b.logf("feed: provisioning %d tenants (3 budgets each)", nTenants)
	client := redis.NewClient(&redis.Options{Addr: b.cfg.redisAddr, PoolSize: backlogWorkers})
	defer client.Close()
	exec, err := script.New(client)
	if err != nil {
		return nil, err
	}
	if err := exec.Load(ctx); err != nil {
		return nil, err
	}
	callers := make([]*ceilingCaller, nTenants)
	err = forEach(nTenants, 16, func(i int) error {
		name := prefix + strconv.Itoa(i)
		if _, err := b.admin.CreateTenant(b.adminCtx(ctx), &cyclesv1.CreateTenantRequest{TenantId: name, Name: name}); err != nil {
			return fmt.Errorf("create tenant %s: %w", name, err)
		}
		if err := b.createBudgets(ctx, name, (&group{shape: "shared", tenant: name}).budgetPaths(0)); err != nil {
			return err
		}
		cc, err := newCeilingCaller(ctx, exec, name)
		callers[i] = cc
		return err
	})
	if err != nil {
		return nil, err
	}

	live := &feedWatcher{prefix: prefix, seen: map[string]bool{}}
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	failed, err := b.watchFeed(wctx, cyclesv1.StartPosition_START_POSITION_NOW, live)
	if err != nil {
		return nil, err
	}
	time.Sleep(500 * time.Millisecond) // let START_NOW resolve before the first expiry

	b.logf("feed: seeding %d reservations (ttl 1 s)", nExp)
	var lastSeed atomic.Int64
	err = forEach(nExp, backlogWorkers, func(i int) error {
		cctx, cancel := context.WithTimeout(ctx, callLimit)
		defer cancel()
		if err := callers[i%nTenants].reserveTTL(cctx, "fd-"+strconv.Itoa(i), backlogTTL, 0); err != nil {
			return err
		}
		lastSeed.Store(time.Now().UnixNano())
		return nil
	})
	if err != nil {
		return nil, err
	}
	time.Sleep(time.Until(time.Unix(0, lastSeed.Load()).Add(backlogTTL*time.Millisecond + 200*time.Millisecond)))

	b.logf("feed: one sweep expires them all; the subscriber is caught up")
	ops := cyclesv1.NewOpsServiceClient(b.adminConn)
	before := b.pids.sample()
	t0 := time.Now()
	sweepDone := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(b.adminCtx(ctx), 10*time.Minute)
		defer cancel()
		// A tenant whose batch timed out on a busy machine is left for the
		// next sweep, as the periodic sweeper would; sweep again.
		var err error
		for try := 0; try < 5; try++ {
			if _, err = ops.TriggerSweep(sctx, &cyclesv1.TriggerSweepRequest{}); err == nil {
				break
			}
			res.SweepRetries++
			b.logf("feed: sweep: %v (sweeping again)", err)
		}
		res.SweepS = round3(time.Since(t0).Seconds())
		sweepDone <- err
	}()
	dctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	if err := live.waitFor(dctx, int64(nExp), failed); err != nil {
		return nil, err
	}
	if err := <-sweepDone; err != nil {
		return nil, fmt.Errorf("trigger sweep: %w", err)
	}
	after := b.pids.sample()
	res.CyclesdCPUSweep = round3((after.server - before.server).Seconds())
	res.RedisCPUSweep = round3((after.redis - before.redis).Seconds())
	live.mu.Lock()
	res.Delivered, res.Duplicates = int64(len(live.seen)), live.dups
	if d := live.last.Sub(t0).Seconds(); d > 0 {
		res.LiveRate = round3(float64(len(live.seen)) / d)
	}
	slices.Sort(live.lat)
	if n := len(live.lat); n > 0 {
		res.LatencyP50Ms, res.LatencyP99Ms, res.LatencyMaxMs = live.lat[n/2], live.lat[n*99/100], live.lat[n-1]
	}
	live.mu.Unlock()
	b.logf("feed: live %d delivered (%d twice) at %.0f/s, p50 %d ms, p99 %d ms", res.Delivered, res.Duplicates, res.LiveRate, res.LatencyP50Ms, res.LatencyP99Ms)

	b.logf("feed: replay from the oldest retained entry")
	replay := &feedWatcher{prefix: prefix, seen: map[string]bool{}}
	rctx, stopReplay := context.WithCancel(ctx)
	if b.pprofAddr != "" {
		go b.fetchProfile(b.cfg.profileOut, 5)
	}
	before = b.pids.sample()
	t1 := time.Now()
	rfailed, err := b.watchFeed(rctx, cyclesv1.StartPosition_START_POSITION_EARLIEST, replay)
	if err != nil {
		stopReplay()
		return nil, err
	}
	if err := replay.waitFor(dctx, int64(nExp), rfailed); err != nil {
		stopReplay()
		return nil, err
	}
	stopReplay()
	after = b.pids.sample()
	res.CyclesdCPUReplay = round3((after.server - before.server).Seconds())
	res.RedisCPUReplay = round3((after.redis - before.redis).Seconds())
	res.ClientCPUReplay = round3((after.client - before.client).Seconds())
	res.ReplayS = round3(time.Since(t1).Seconds())
	res.ReplayRate = round3(float64(nExp) / res.ReplayS)
	if replay.dups > 0 {
		res.Duplicates += replay.dups
	}
	res.Reconnects = live.reconnects.Load() + replay.reconnects.Load()

	b.logf("feed: %d idle tenants", nIdle)
	err = forEach(nIdle, 16, func(i int) error {
		name := prefix + "idle-" + strconv.Itoa(i)
		_, err := b.admin.CreateTenant(b.adminCtx(ctx), &cyclesv1.CreateTenantRequest{TenantId: name, Name: name})
		return err
	})
	if err != nil {
		return nil, err
	}
	time.Sleep(2 * time.Second) // the announcements of tenant.created settle
	measure := func() (cmds, serverPct, redisPct float64) {
		s0 := b.pids.sample()
		time.Sleep(window)
		s1 := b.pids.sample()
		el := s1.at.Sub(s0.at).Seconds()
		// The two INFO calls of the sample itself are not the feed's.
		return round3(float64(s1.commands-s0.commands-1) / el),
			round3(100 * (s1.server - s0.server).Seconds() / el), round3(100 * (s1.redis - s0.redis).Seconds() / el)
	}
	res.IdleCmdsWithSub, res.IdleCyclesdCPUPct, res.IdleRedisCPUPct = measure()
	stopWatch()
	time.Sleep(3 * time.Second) // the feed waiter ends after its current block
	res.IdleCmdsWithoutSub, _, _ = measure()
	res.IdleCmdsFromFeed = round3(res.IdleCmdsWithSub - res.IdleCmdsWithoutSub)
	// The sweeper's reconciliation reads one XREVRANGE per tenant inside its
	// own per-tenant script, once per ReconcileInterval (10 min).
	res.ReconcileXrevrangePS = round3(float64(nTenants+nIdle) / 600)
	b.logf("feed: idle Redis commands/s with the subscriber %.2f, without %.2f", res.IdleCmdsWithSub, res.IdleCmdsWithoutSub)
	return res, nil
}

// fetchProfile writes a CPU profile of cyclesd (serve mode) over secs.
func (b *runner) fetchProfile(path string, secs int) {
	resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", b.pprofAddr, secs))
	if err != nil {
		b.logf("profile: %v", err)
		return
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	_ = os.WriteFile(path, raw, 0o644)
}
