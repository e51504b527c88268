package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cyclesgo/cycles-go/bench"
	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/script"
)

const (
	backlogTenants = 10
	backlogWorkers = 50
	backlogTTL     = 1000 // the protocol's minimum ttl_ms
)

// runBacklog seeds n reservations (ttl 1 s, no grace, spread over
// backlogTenants tenants with three budgeted scopes each, provisioned through
// the AdminService) by running the ledger's reserve script through
// internal/script with the service's KEYS/ARGV (as the ceiling does: twice as fast
// as going through cyclesd, and the records are the same), waits until every
// one is due, and times one OpsService.TriggerSweep that drains them all. It
// then checks every budget is back to its allocation.
func (b *runner) runBacklog(ctx context.Context, n int) (*bench.Backlog, bench.LedgerCheck, error) {
	type tenantSeed struct {
		name  string
		paths []string
		cc    *ceilingCaller
	}
	client := redis.NewClient(&redis.Options{Addr: b.cfg.redisAddr, PoolSize: backlogWorkers})
	defer client.Close()
	exec, err := script.New(client)
	if err != nil {
		return nil, bench.LedgerCheck{}, err
	}
	if err := exec.Load(ctx); err != nil {
		return nil, bench.LedgerCheck{}, err
	}
	var tenants []tenantSeed
	for i := 0; i < backlogTenants; i++ {
		name := fmt.Sprintf("bench-%s-backlog-%d", b.runID, i)
		if _, err := b.provisionTenant(ctx, name); err != nil {
			return nil, bench.LedgerCheck{}, err
		}
		paths := (&group{shape: "shared", tenant: name}).budgetPaths(0)
		if err := b.createBudgets(ctx, name, paths); err != nil {
			return nil, bench.LedgerCheck{}, err
		}
		cc, err := newCeilingCaller(ctx, exec, name)
		if err != nil {
			return nil, bench.LedgerCheck{}, err
		}
		tenants = append(tenants, tenantSeed{name: name, paths: paths, cc: cc})
	}
	var (
		next    atomic.Int64
		seeded  atomic.Int64
		errs    atomic.Int64
		lastMu  sync.Mutex
		lastEnd time.Time
		wg      sync.WaitGroup
	)
	start := time.Now()
	for i := 0; i < backlogWorkers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k := next.Add(1)
				if k > int64(n) {
					break
				}
				ts := tenants[k%backlogTenants]
				cctx, cancel := context.WithTimeout(ctx, callLimit)
				err := ts.cc.reserveTTL(cctx, "bl-"+strconv.FormatInt(k, 10), backlogTTL, 0)
				cancel()
				if err != nil {
					errs.Add(1)
					continue
				}
				seeded.Add(1)
			}
			lastMu.Lock()
			if t := time.Now(); t.After(lastEnd) {
				lastEnd = t
			}
			lastMu.Unlock()
		}()
	}
	wg.Wait()
	// What Redis holds: every seeded reservation in its tenant's deadline
	// index (a plain read by the tool, to account for every entry).
	indexed := func() int64 {
		var n int64
		for _, ts := range tenants {
			n += client.ZCard(ctx, keys.Tenant(ts.name).Deadlines()).Val()
		}
		return n
	}
	out := &bench.Backlog{IndexedBefore: indexed()}
	*out = bench.Backlog{IndexedBefore: out.IndexedBefore, Reservations: seeded.Load(), Tenants: backlogTenants, SeedS: round3(time.Since(start).Seconds()), SeedErrors: errs.Load()}

	// Every reservation is due once Redis time passes its expires_at (no
	// grace); wait out the TTL from the last successful reserve plus margin
	// for clock granularity.
	time.Sleep(time.Until(lastEnd.Add(backlogTTL*time.Millisecond + 200*time.Millisecond)))

	ops := cyclesv1.NewOpsServiceClient(b.adminConn)
	sctx, cancel := context.WithTimeout(b.adminCtx(ctx), 10*time.Minute)
	defer cancel()
	before, err := ops.GetSweeperStatus(sctx, &cyclesv1.GetSweeperStatusRequest{})
	if err != nil {
		return nil, bench.LedgerCheck{}, fmt.Errorf("sweeper status: %w", err)
	}
	restore := logEveryCommand(ctx, client)
	t0 := time.Now()
	res, err := ops.TriggerSweep(sctx, &cyclesv1.TriggerSweepRequest{})
	if err != nil {
		restore()
		return nil, bench.LedgerCheck{}, fmt.Errorf("trigger sweep: %w", err)
	}
	out.ScriptCalls, out.ScriptMaxMs, out.ScriptP50Ms = expireCalls(ctx, client)
	restore()
	out.DrainS = round3(time.Since(t0).Seconds())
	out.ServerDrainS = round3(float64(res.GetDurationMs()) / 1000)
	out.Expired = res.GetCounts().GetExpired()
	cnt := res.GetCounts()
	out.SweepCounts = map[string]int64{"expired": cnt.GetExpired(), "skipped": cnt.GetSkipped(), "in_grace": cnt.GetInGrace(),
		"not_found": cnt.GetNotFound(), "quarantined": cnt.GetQuarantined()}
	if after, err := ops.GetSweeperStatus(sctx, &cyclesv1.GetSweeperStatusRequest{}); err == nil {
		// Totals include the triggered sweep; the rest was the periodic one.
		out.BackgroundExpired = after.GetTotals().GetExpired() - before.GetTotals().GetExpired() - cnt.GetExpired()
	}
	if out.DrainS > 0 {
		out.Rate = round3(float64(out.Expired) / out.DrainS)
	}
	if out.ScriptCalls > 0 {
		out.PerScriptCall = round3(float64(out.Expired) / float64(out.ScriptCalls))
	}

	out.IndexedAfter = indexed()
	chk := bench.LedgerCheck{Group: fmt.Sprintf("bench-%s-backlog-*", b.runID)}
	if out.IndexedBefore != out.Reservations || out.IndexedAfter != 0 {
		chk.Mismatches++
		chk.Details = append(chk.Details, fmt.Sprintf("deadline indexes held %d entries after seeding %d, %d after the sweep",
			out.IndexedBefore, out.Reservations, out.IndexedAfter))
	}
	if out.Expired != out.Reservations {
		chk.Mismatches++
		chk.Details = append(chk.Details, fmt.Sprintf("sweep expired %d, %d were seeded (sweep counts %v, status totals before %v)",
			out.Expired, out.Reservations, out.SweepCounts, before.GetTotals()))
	}
	for _, ts := range tenants {
		for _, p := range ts.paths {
			chk.Budgets++
			got, err := b.getBudget(ctx, ts.name, p)
			if err != nil {
				chk.Mismatches++
				chk.Details = append(chk.Details, fmt.Sprintf("%s %s: %v", ts.name, p, err))
				continue
			}
			if got.GetReserved() != 0 || got.GetRemaining() != b.cfg.allocated || got.GetSpent() != 0 {
				chk.Mismatches++
				chk.Details = append(chk.Details, fmt.Sprintf("%s %s: after the drain reserved=%d remaining=%d spent=%d; want 0, %d, 0",
					ts.name, p, got.GetReserved(), got.GetRemaining(), got.GetSpent(), b.cfg.allocated))
			}
		}
	}
	out.Mismatches = chk.Mismatches
	return out, chk, nil
}

// logEveryCommand has Redis's SLOWLOG record every command (threshold 0)
// from now on, emptied, and returns the function that puts the previous
// settings back.
func logEveryCommand(ctx context.Context, c *redis.Client) func() {
	prev, err := c.ConfigGet(ctx, "slowlog-*").Result()
	if err != nil {
		return func() {}
	}
	c.ConfigSet(ctx, "slowlog-log-slower-than", "0")
	c.ConfigSet(ctx, "slowlog-max-len", "50000")
	c.SlowLogReset(ctx)
	return func() {
		for _, k := range []string{"slowlog-log-slower-than", "slowlog-max-len"} {
			if v, ok := prev[k]; ok {
				c.ConfigSet(ctx, k, v)
			}
		}
		c.SlowLogReset(ctx)
	}
}

// expireCalls reads the SLOWLOG logEveryCommand started: the number of
// expiry script calls (EVALSHA/FCALL naming a deadline index) and the
// longest and median execution time, in ms.
func expireCalls(ctx context.Context, c *redis.Client) (n int64, maxMs, p50Ms float64) {
	logs, err := c.SlowLogGet(ctx, 50000).Result()
	if err != nil {
		return 0, 0, 0
	}
	var ds []time.Duration
	for _, l := range logs {
		if len(l.Args) < 4 {
			continue
		}
		switch strings.ToLower(l.Args[0]) {
		case "evalsha", "fcall", "eval":
		default:
			continue
		}
		for _, a := range l.Args[3:] {
			if strings.HasSuffix(a, ":r:deadline") {
				ds = append(ds, l.Duration)
				break
			}
		}
	}
	if len(ds) == 0 {
		return 0, 0, 0
	}
	slices.Sort(ds)
	ms := func(d time.Duration) float64 { return round3(float64(d.Microseconds()) / 1000) }
	return int64(len(ds)), ms(ds[len(ds)-1]), ms(ds[len(ds)/2])
}
