package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/cyclesgo/cycles-go/bench"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/ledger"
	"github.com/cyclesgo/cycles-go/internal/script"
	"github.com/cyclesgo/cycles-go/internal/store/redisinfo"
	"github.com/cyclesgo/cycles-go/test/pgtest"
	"github.com/cyclesgo/cycles-go/test/redistest"
)

// ArchiveResult is the outcome of `cycles-bench archive`: issue 22's
// performance acceptance measured on a real cyclesd with the archive on
// (a private redis-server and PostgreSQL on the same machine).
type ArchiveResult struct {
	CPUs int `json:"cpus"`
	// LoadAvg is /proc/loadavg at the start and end: the machine may be
	// shared, and the figures mean little without it.
	LoadAvgStart string  `json:"loadavg_start"`
	LoadAvgEnd   string  `json:"loadavg_end"`
	HotWindowS   float64 `json:"hot_window_s"`
	// Load is how the settles are produced (archiveLoads): over cyclesd's
	// gRPC API, or in process by the ledger scripts; Tenants how many
	// tenants they are spread over.
	Load    string `json:"load"`
	Tenants int    `json:"tenants"`

	// Drain: DrainBacklog reservations settle while PostgreSQL is down,
	// then it is restarted and the backlog is timed from the first batch
	// archived to an empty queue (the catch-up rate after an outage, and
	// the archiver's top speed).
	DrainBacklog  int     `json:"drain_backlog"`
	DrainS        float64 `json:"drain_s"`
	DrainRate     float64 `json:"drain_reservations_per_s"`
	DrainFirstS   float64 `json:"drain_first_batch_after_restart_s"`
	ArchivedRows  int64   `json:"archived_rows"`
	ArchivedDupes int64   `json:"archived_duplicates"`

	// Lag: reserve+commit paced at LagTarget settles/s for LagWindowS; the
	// archive lag (age of the oldest queued settled reservation, Redis
	// TIME) sampled every 250 ms.
	LagTarget   float64 `json:"lag_target_settles_per_s"`
	LagAchieved float64 `json:"lag_achieved_settles_per_s"`
	LagWindowS  float64 `json:"lag_window_s"`
	LagSamples  int     `json:"lag_samples"`
	LagP50Ms    int64   `json:"lag_p50_ms"`
	LagP99Ms    int64   `json:"lag_p99_ms"`
	LagMaxMs    int64   `json:"lag_max_ms"`
	LagErrors   int64   `json:"lag_errors"`
	// LagMeasure says what the lag figures are; the cores are each
	// process's CPU over the lag window (1.0 = one core busy): cyclesd's is
	// the archiver's (plus the idle server) when the load is in process.
	LagMeasure      string  `json:"lag_measure"`
	LagCyclesdCPU   float64 `json:"lag_cyclesd_cores"`
	LagRedisCPU     float64 `json:"lag_redis_cores"`
	LagGeneratorCPU float64 `json:"lag_generator_cores"`

	// Plateau: reserve+commit paced at PlateauTarget for PlateauWindowS;
	// Redis used_memory (less client buffers) sampled over time.
	PlateauTarget   float64        `json:"plateau_target_settles_per_s"`
	PlateauAchieved float64        `json:"plateau_achieved_settles_per_s"`
	PlateauWindowS  float64        `json:"plateau_window_s"`
	Memory          []MemorySample `json:"memory"`
	PlateauBaseline int64          `json:"plateau_baseline_bytes"`
	// PlateauLevel is the fitted used_memory at the start (baseline plus
	// what the window holds), PlateauGrowth the fitted slope after the
	// first window.
	PlateauLevel          int64               `json:"plateau_level_bytes"`
	PlateauGrowth         float64             `json:"plateau_growth_bytes_per_s"`
	WindowBytesPerSettled float64             `json:"window_bytes_per_settled"`
	KeptBytesPerSettled   float64             `json:"kept_past_window_bytes_per_settled"`
	WindowGBAt1000        float64             `json:"window_gb_at_1000_per_s_24h"`
	Ledger                []bench.LedgerCheck `json:"ledger"`
}

// MemorySample is one used_memory reading of the plateau phase.
type MemorySample struct {
	AtS     float64 `json:"at_s"`
	Used    int64   `json:"used_bytes"`
	Settled int64   `json:"settled"`
	Queued  int64   `json:"archive_queued"`
	// Keys is Redis's key count, Expired its count of keys expired so far
	// (INFO keyspace, stats); Indexed the tenant's listing index entries
	// (ZCARD of r:created): where the bytes are.
	Keys    int64 `json:"keys"`
	Expired int64 `json:"expired_keys"`
	Indexed int64 `json:"index_entries"`
}

func archiveMain(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("cycles-bench archive", flag.ContinueOnError)
	phases := fs.String("phases", "drain,lag,plateau", "phases to run, comma-separated")
	backlog := fs.Int("drain", 30_000, "reservations settled while PostgreSQL is down, then archived in one catch-up")
	lagRate := fs.Float64("lag-rate", 3000, "settles/s offered in the lag phase")
	lagFor := fs.Duration("lag-for", 30*time.Second, "length of the lag phase")
	plateauRate := fs.Float64("plateau-rate", 300, "settles/s offered in the plateau phase")
	plateauFor := fs.Duration("plateau-for", 3*time.Minute, "length of the plateau phase (at least 3 hot windows to see the level)")
	hot := fs.Duration("hot-retention", 60*time.Second, "cyclesd -hot-retention")
	workers := fs.Int("workers", 64, "concurrent reserve+commit loops")
	load := fs.String("load", "grpc", "how settles are produced: grpc (reserve+commit through cyclesd's gRPC API) or ledger (in this process by internal/ledger's scripts against the same Redis, no transport; cyclesd only archives)")
	tenants := fs.Int("tenants", 16, "with -load ledger: tenants the settles are spread over (shared budgets in each)")
	var tf toolFlags
	tf.register(fs, "bench/results/archive.json")
	profile := fs.String("profile-out", "", "CPU-profile cyclesd (serve mode) during the drain into this file")
	profileSecs := fs.Int("profile-seconds", 5, "length of the drain profile")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if _, ok := archiveLoads[*load]; !ok {
		return fmt.Errorf("-load: %q is not grpc or ledger", *load)
	}
	if *load == "grpc" {
		*tenants = 1 // one tenant per phase, as the gRPC load always did
	}
	if *tenants < 1 || *tenants > *workers {
		return fmt.Errorf("-tenants: %d is not between 1 and -workers (%d)", *tenants, *workers)
	}
	pgDir, err := os.MkdirTemp("", "cycles-bench-pg-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(pgDir)
	port, err := redistest.Port()
	if err != nil {
		return err
	}
	pg, err := pgtest.StartProcess(pgDir, port)
	if err != nil {
		return err
	}
	defer func() { pg.Stop() }()
	dsn, err := createDatabase(ctx, pg, "cycles_bench")
	if err != nil {
		return err
	}
	cfg := &config{adminKey: defaultAdminKey, cyclesdBin: tf.bin, allocated: 1 << 50,
		serverArgs: []string{"-archive-dsn", dsn, "-hot-retention", hot.String()}}
	if *profile != "" {
		cfg.profileCell = "archive/drain"
	}
	b, cleanup, err := startTool(ctx, cfg, tf.quiet)
	if err != nil {
		return err
	}
	defer cleanup()
	a := &archiveRun{runner: b, pg: pg, dsn: dsn, workers: *workers, tenants: *tenants,
		rc: redis.NewClient(&redis.Options{Addr: b.cfg.redisAddr, PoolSize: 4})}
	defer a.rc.Close()
	if *load == "ledger" {
		lc := redis.NewClient(&redis.Options{Addr: b.cfg.redisAddr, PoolSize: *workers})
		defer lc.Close()
		if a.led, err = inProcessLedger(ctx, lc); err != nil {
			return err
		}
	}
	res := &ArchiveResult{CPUs: runtime.NumCPU(), LoadAvgStart: loadAvg(), HotWindowS: hot.Seconds(),
		Load: *load + ": " + archiveLoads[*load], Tenants: *tenants}
	for _, ph := range strings.Split(*phases, ",") {
		switch strings.TrimSpace(ph) {
		case "drain":
			err = a.drain(ctx, res, *backlog, *profile, *profileSecs)
		case "lag":
			err = a.lag(ctx, res, *lagRate, *lagFor)
		case "plateau":
			err = a.plateau(ctx, res, *plateauRate, *plateauFor, *hot)
		default:
			err = fmt.Errorf("unknown phase %q", ph)
		}
		if err != nil {
			return err
		}
	}
	res.LoadAvgEnd = loadAvg()
	if err := saveResult(tf.out, res); err != nil {
		return err
	}
	for _, l := range res.Ledger {
		if l.Mismatches > 0 {
			return fmt.Errorf("ledger mismatches in %s: %v", l.Group, l.Details)
		}
	}
	if res.ArchivedDupes > 0 || (res.DrainBacklog > 0 && res.ArchivedRows < int64(res.DrainBacklog)) {
		return fmt.Errorf("archived %d rows for %d settled, %d duplicates", res.ArchivedRows, res.DrainBacklog, res.ArchivedDupes)
	}
	return nil
}

// createDatabase creates db on pg and returns its DSN.
func createDatabase(ctx context.Context, pg *pgtest.Server, db string) (string, error) {
	c, err := pgx.Connect(ctx, pg.DSN("postgres"))
	if err != nil {
		return "", fmt.Errorf("connect postgres: %w", err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		return "", fmt.Errorf("create database: %w", err)
	}
	return pg.DSN(db), nil
}

func loadAvg() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(raw))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

type archiveRun struct {
	*runner
	pg      *pgtest.Server
	dsn     string
	workers int
	tenants int
	rc      *redis.Client
	// led settles in process (-load ledger); nil: over gRPC.
	led *ledger.Ledger
}

// archiveLoads are the ways `cycles-bench archive` produces settles, as the
// result names them. The archiver's work is the same either way: it sees
// only the tenants' archive queues the settling scripts fill.
var archiveLoads = map[string]string{
	"grpc":   "reserve+commit through cyclesd's gRPC API",
	"ledger": "settles produced in-process by the ledger scripts (internal/ledger), not over gRPC; cyclesd only archives",
}

// inProcessLedger is a ledger on c running the same scripts as cyclesd, the
// same way (Functions on Redis 7, pipelined), with the archive on as
// cyclesd's -archive-dsn has it: settled records go to the archive queues.
func inProcessLedger(ctx context.Context, c *redis.Client) (*ledger.Ledger, error) {
	var opts []script.Option
	if redisMajor(ctx, c) >= 7 {
		opts = append(opts, script.WithFunctions())
	}
	exec, err := script.New(c, opts...)
	if err != nil {
		return nil, err
	}
	if err := exec.Load(ctx); err != nil {
		return nil, err
	}
	return ledger.New(exec, ledger.Options{Archive: true}), nil
}

// phaseGroups provisions a phase's tenants: over gRPC one group of every
// worker; in process a.tenants groups with no connections, whose workers'
// calls run through a.led as their tenant's API key would (its principal).
func (a *archiveRun) phaseGroups(ctx context.Context, phase string) ([]*group, error) {
	name := fmt.Sprintf("bench-%s-archive-%s", a.runID, phase)
	if a.led == nil {
		g, err := a.newGroupNamed(ctx, name, "shared", a.workers)
		if err != nil {
			return nil, err
		}
		return []*group{g}, nil
	}
	per := (a.workers + a.tenants - 1) / a.tenants
	gs := make([]*group, a.tenants)
	err := forEach(a.tenants, 4, func(i int) error {
		g := &group{b: a.runner, shape: "shared", clients: per, tenant: fmt.Sprintf("%s-%d", name, i), led: a.led}
		if _, err := a.provisionTenant(ctx, g.tenant); err != nil {
			return err
		}
		if err := a.createBudgets(ctx, g.tenant, g.budgetPaths(0)); err != nil {
			return err
		}
		pctx := auth.WithPrincipal(ctx, auth.Principal{Tenant: g.tenant, KeyID: "0000000000000001"})
		for w := 0; w < per; w++ {
			g.ctxs = append(g.ctxs, pctx)
			g.workers = append(g.workers, &workerLedger{subject: g.subject(w)})
		}
		gs[i] = g
		return nil
	})
	return gs, err
}

func closeGroups(gs []*group) {
	for _, g := range gs {
		g.close()
	}
}

func tenantsOf(gs []*group) []string {
	out := make([]string, len(gs))
	for i, g := range gs {
		out[i] = g.tenant
	}
	return out
}

// verifyGroups checks every group's ledger (GetBudget through cyclesd).
func (a *archiveRun) verifyGroups(ctx context.Context, res *ArchiveResult, gs []*group) {
	for _, g := range gs {
		res.Ledger = append(res.Ledger, g.verify(ctx))
	}
}

// queue is the archive queues of gs's tenants: their total length and the
// age of the oldest entry of any of them on Redis TIME (0 when empty).
func (a *archiveRun) queue(ctx context.Context, gs []*group) (n int64, lag time.Duration, err error) {
	p := a.rc.Pipeline()
	lens := make([]*redis.IntCmd, len(gs))
	firsts := make([]*redis.XMessageSliceCmd, len(gs))
	for i, g := range gs {
		q := keys.Tenant(g.tenant).ArchiveQueue()
		lens[i] = p.XLen(ctx, q)
		firsts[i] = p.XRangeN(ctx, q, "-", "+", 1)
	}
	now := p.Time(ctx)
	if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return 0, 0, err
	}
	for i := range gs {
		n += lens[i].Val()
		if msgs := firsts[i].Val(); len(msgs) > 0 {
			if ms, _, ok := script.ParseStreamID(msgs[0].ID); ok {
				lag = max(lag, now.Val().Sub(time.UnixMilli(int64(ms))))
			}
		}
	}
	return n, lag, nil
}

// settle runs reserve+commit on a.workers workers spread over gs (worker w
// is worker w/len(gs) of group w%len(gs)): n in all as fast as they go
// (rate 0), or paced at rate per second until stop closes. It returns the
// errors; settled counts the settles.
func (a *archiveRun) settle(ctx context.Context, gs []*group, n int, rate float64, stop <-chan struct{}, settled *atomic.Int64) int64 {
	var errs atomic.Int64
	tokens := make(chan struct{}, a.workers)
	var left atomic.Int64
	left.Store(int64(n))
	done := make(chan struct{})
	if rate > 0 {
		go func() {
			defer close(tokens)
			t := time.NewTicker(10 * time.Millisecond)
			defer t.Stop()
			start, sent := time.Now(), 0.0
			for {
				select {
				case <-stop:
					return
				case <-done:
					return
				case <-t.C:
					due := time.Since(start).Seconds() * rate
					for ; sent < due; sent++ {
						select {
						case tokens <- struct{}{}:
						default: // the workers are behind: the offered rate is not reached
						}
					}
				}
			}
		}()
	}
	var wg sync.WaitGroup
	for w := 0; w < a.workers; w++ {
		wg.Add(1)
		go func(g *group, w int) {
			defer wg.Done()
			for {
				if rate > 0 {
					if _, ok := <-tokens; !ok {
						return
					}
				} else if left.Add(-1) < 0 {
					return
				}
				if _, err := g.opLifecycle(ctx, w); err != nil {
					errs.Add(1)
					if ctx.Err() != nil {
						return
					}
					continue
				}
				settled.Add(1)
			}
		}(gs[w%len(gs)], w/len(gs))
	}
	wg.Wait()
	close(done)
	return errs.Load()
}

func (a *archiveRun) drain(ctx context.Context, res *ArchiveResult, n int, profile string, profileSecs int) error {
	gs, err := a.phaseGroups(ctx, "drain")
	if err != nil {
		return err
	}
	defer closeGroups(gs)
	a.logf("archive drain: PostgreSQL stopped; settling %d reservations (%s, %d tenants)", n, res.Load, len(gs))
	a.pg.Stop()
	var settled atomic.Int64
	t0 := time.Now()
	if errs := a.settle(ctx, gs, n, 0, nil, &settled); errs > 0 {
		a.logf("archive drain: %d reserve/commit errors", errs)
	}
	a.logf("archive drain: %d settled in %.1fs", settled.Load(), time.Since(t0).Seconds())
	queued, _, err := a.queue(ctx, gs)
	if err != nil {
		return err
	}
	if profile != "" && a.pprofAddr != "" {
		go a.fetchProfile(profile, profileSecs)
	}
	restart := time.Now()
	if err := a.pg.Restart(); err != nil {
		return fmt.Errorf("restart postgres: %w", err)
	}
	var first time.Time
	var atFirst int64
	for {
		left, _, err := a.queue(ctx, gs)
		if err != nil {
			return err
		}
		if first.IsZero() && left < queued {
			first, atFirst = time.Now(), left
		}
		if left == 0 {
			break
		}
		if time.Since(restart) > 10*time.Minute {
			return fmt.Errorf("archive drain: %d of %d still queued after 10 min", left, queued)
		}
		time.Sleep(20 * time.Millisecond)
	}
	end := time.Now()
	res.DrainBacklog = int(settled.Load())
	res.DrainFirstS = round3(first.Sub(restart).Seconds())
	res.DrainS = round3(end.Sub(first).Seconds())
	if res.DrainS > 0 {
		// From the first batch's commit to the last one's: the rows of the
		// batches after the first.
		res.DrainRate = float64(int64(float64(atFirst) / end.Sub(first).Seconds()))
	}
	c, err := pgx.Connect(ctx, a.dsn)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	var rows, distinct int64
	if err := c.QueryRow(ctx, `SELECT count(*), count(DISTINCT (tenant_id, rid)) FROM cycles_reservations WHERE tenant_id = ANY($1)`,
		tenantsOf(gs)).Scan(&rows, &distinct); err != nil {
		return err
	}
	res.ArchivedRows, res.ArchivedDupes = rows, rows-distinct
	a.verifyGroups(ctx, res, gs)
	a.logf("archive drain: %d archived in %.2fs after the first batch (%.0f/s; first batch %.2fs after the restart)",
		queued, res.DrainS, res.DrainRate, res.DrainFirstS)
	return nil
}

// lagMeasure is what the lag phase's figures are.
const lagMeasure = "the bench's own sampling every 250 ms (after 2 s): the age, on Redis TIME, of the oldest entry in any of the phase's tenants' archive queues (a settled reservation not yet in PostgreSQL)"

func (a *archiveRun) lag(ctx context.Context, res *ArchiveResult, rate float64, d time.Duration) error {
	gs, err := a.phaseGroups(ctx, "lag")
	if err != nil {
		return err
	}
	defer closeGroups(gs)
	a.logf("archive lag: reserve+commit paced at %.0f/s for %s (%s, %d tenants)", rate, d, res.Load, len(gs))
	stop := make(chan struct{})
	var settled atomic.Int64
	var samples []time.Duration
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		warm := time.Now().Add(2 * time.Second)
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if _, lag, err := a.queue(ctx, gs); err == nil && time.Now().After(warm) {
					samples = append(samples, lag)
				}
			}
		}
	}()
	start := time.Now()
	cpu0 := a.pids.sample()
	time.AfterFunc(d, func() { close(stop) })
	errs := a.settle(ctx, gs, 0, rate, stop, &settled)
	elapsed := time.Since(start)
	cpu1 := a.pids.sample()
	<-sampled
	res.LagTarget, res.LagWindowS, res.LagErrors, res.LagMeasure = rate, round3(elapsed.Seconds()), errs, lagMeasure
	res.LagAchieved = float64(int64(float64(settled.Load()) / elapsed.Seconds()))
	if secs := cpu1.at.Sub(cpu0.at).Seconds(); secs > 0 {
		res.LagCyclesdCPU = round3((cpu1.server - cpu0.server).Seconds() / secs)
		res.LagRedisCPU = round3((cpu1.redis - cpu0.redis).Seconds() / secs)
		res.LagGeneratorCPU = round3((cpu1.client - cpu0.client).Seconds() / secs)
	}
	slices.Sort(samples)
	res.LagSamples = len(samples)
	if len(samples) > 0 {
		pct := func(p float64) int64 { return samples[int(p*float64(len(samples)-1))].Milliseconds() }
		res.LagP50Ms, res.LagP99Ms, res.LagMaxMs = pct(0.50), pct(0.99), samples[len(samples)-1].Milliseconds()
	}
	a.verifyGroups(ctx, res, gs)
	a.logf("archive lag: %.0f settles/s achieved; lag p50 %d ms, p99 %d ms, max %d ms (%d samples); cores: cyclesd %.2f, redis %.2f, generator %.2f",
		res.LagAchieved, res.LagP50Ms, res.LagP99Ms, res.LagMaxMs, res.LagSamples, res.LagCyclesdCPU, res.LagRedisCPU, res.LagGeneratorCPU)
	return nil
}

func (a *archiveRun) plateau(ctx context.Context, res *ArchiveResult, rate float64, d, hot time.Duration) error {
	gs, err := a.phaseGroups(ctx, "plateau")
	if err != nil {
		return err
	}
	defer closeGroups(gs)
	// Let what earlier phases left in the hot window expire first, so the
	// baseline is what Redis holds without settled history.
	if res.DrainBacklog > 0 || res.LagAchieved > 0 {
		a.logf("archive plateau: waiting %s for earlier phases' records to leave the hot window", hot+5*time.Second)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(hot + 5*time.Second):
		}
	}
	base, err := usedMemory(ctx, a.rc)
	if err != nil {
		return err
	}
	a.logf("archive plateau: reserve+commit paced at %.0f/s for %s, hot window %s; used_memory every 5 s", rate, d, hot)
	stop := make(chan struct{})
	var settled atomic.Int64
	sampled := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(sampled)
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				used, err := usedMemory(ctx, a.rc)
				queued, _, qerr := a.queue(ctx, gs)
				if err != nil || qerr != nil {
					continue
				}
				s := MemorySample{AtS: round3(time.Since(start).Seconds()), Used: used, Settled: settled.Load(), Queued: queued}
				s.Keys, s.Expired = a.keyCounts(ctx)
				for _, g := range gs {
					s.Indexed += a.rc.ZCard(ctx, keys.Tenant(g.tenant).Created()).Val()
				}
				res.Memory = append(res.Memory, s)
				a.logf("  t=%5.0fs used_memory %7.2f MB (+%6.2f MB)  settled %7d  queued %5d  keys %7d  expired %7d  index %7d", s.AtS,
					float64(used)/1e6, float64(used-base)/1e6, s.Settled, s.Queued, s.Keys, s.Expired, s.Indexed)
			}
		}
	}()
	time.AfterFunc(d, func() { close(stop) })
	errs := a.settle(ctx, gs, 0, rate, stop, &settled)
	elapsed := time.Since(start)
	<-sampled
	if errs > 0 {
		a.logf("archive plateau: %d reserve/commit errors", errs)
	}
	res.PlateauTarget, res.PlateauWindowS, res.PlateauBaseline = rate, round3(elapsed.Seconds()), base
	res.PlateauAchieved = float64(int64(float64(settled.Load()) / elapsed.Seconds()))
	// Past the first hot window (plus 10 s for the archiver's rounds), the
	// records in Redis are those settled in the last window: a constant
	// amount at a steady rate. Whatever still grows is kept past the
	// window (idempotency records, index entries). A least-squares line
	// through those samples: its slope is that growth, its value at t = 0
	// less the baseline is what the window holds.
	var xs, ys []float64
	for _, s := range res.Memory {
		if s.AtS >= hot.Seconds()+10 {
			xs, ys = append(xs, s.AtS), append(ys, float64(s.Used))
		}
	}
	if slope, icept, ok := fitLine(xs, ys); ok && res.PlateauAchieved > 0 {
		res.PlateauGrowth = round3(slope)
		res.PlateauLevel = int64(icept)
		res.WindowBytesPerSettled = round3((icept - float64(base)) / (res.PlateauAchieved * hot.Seconds()))
		res.KeptBytesPerSettled = round3(slope / res.PlateauAchieved)
		res.WindowGBAt1000 = round3(res.WindowBytesPerSettled * 1000 * 86400 / 1e9)
	}
	a.verifyGroups(ctx, res, gs)
	a.logf("archive plateau: the window holds %.2f MB (%.0f B per settled reservation in it: %.1f GB at 1,000/s with a 24 h window); still growing %.0f B/s (%.0f B per settled reservation kept past the window)",
		(float64(res.PlateauLevel)-float64(base))/1e6, res.WindowBytesPerSettled, res.WindowGBAt1000, res.PlateauGrowth, res.KeptBytesPerSettled)
	return nil
}

// fitLine is the least-squares line through (xs, ys): slope and value at 0.
func fitLine(xs, ys []float64) (slope, icept float64, ok bool) {
	n := float64(len(xs))
	if len(xs) < 3 {
		return 0, 0, false
	}
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx, sy, sxx, sxy = sx+xs[i], sy+ys[i], sxx+xs[i]*xs[i], sxy+xs[i]*ys[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return 0, 0, false
	}
	slope = (n*sxy - sx*sy) / d
	return slope, (sy - slope*sx) / n, true
}

// keyCounts are db0's key count and the keys expired so far.
func (a *archiveRun) keyCounts(ctx context.Context) (keys, expired int64) {
	info, err := a.rc.Info(ctx, "keyspace", "stats").Result()
	if err != nil {
		return 0, 0
	}
	if db := redisinfo.Field(info, "db0"); db != "" {
		k, _, _ := strings.Cut(strings.TrimPrefix(db, "keys="), ",")
		keys, _ = strconv.ParseInt(k, 10, 64)
	}
	expired, _ = strconv.ParseInt(redisinfo.Field(info, "expired_keys"), 10, 64)
	return keys, expired
}
