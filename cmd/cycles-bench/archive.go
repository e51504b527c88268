package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
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
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/script"
	"github.com/cyclesgo/cycles-go/internal/store/redisinfo"
	"github.com/cyclesgo/cycles-go/test/pgtest"
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
	out := fs.String("out", "bench/results/archive.json", "result file")
	bin := fs.String("cyclesd", "", "cyclesd binary (default: bin/cyclesd, else go build)")
	profile := fs.String("profile-out", "", "CPU-profile cyclesd (serve mode) during the drain into this file")
	profileSecs := fs.Int("profile-seconds", 5, "length of the drain profile")
	quiet := fs.Bool("q", false, "no progress lines")
	if err := fs.Parse(args); err != nil {
		return err
	}
	b := &runner{log: os.Stderr, runID: newRunID()}
	if *quiet {
		b.log = io.Discard
	}
	pgDir, err := os.MkdirTemp("", "cycles-bench-pg-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(pgDir)
	port, err := pgtest.FreePort()
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
	b.cfg = &config{adminKey: defaultAdminKey, cyclesdBin: *bin, allocated: 1 << 50,
		serverArgs: []string{"-archive-dsn", dsn, "-hot-retention", hot.String()}}
	if *profile != "" {
		b.cfg.profileCell = "archive/drain"
	}
	cleanup, err := b.setup(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	a := &archiveRun{runner: b, pg: pg, dsn: dsn, workers: *workers,
		rc: redis.NewClient(&redis.Options{Addr: b.cfg.redisAddr, PoolSize: 4})}
	defer a.rc.Close()
	res := &ArchiveResult{CPUs: runtime.NumCPU(), LoadAvgStart: loadAvg(), HotWindowS: hot.Seconds()}
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
	if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
		return err
	}
	raw, _ := json.MarshalIndent(res, "", "  ")
	if err := os.WriteFile(*out, append(raw, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Println(string(raw))
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
	rc      *redis.Client
}

// queue is the archive queue of g's tenant: its length and the age of its
// oldest entry on Redis TIME (0 when empty).
func (a *archiveRun) queue(ctx context.Context, g *group) (n int64, lag time.Duration, err error) {
	q := keys.Tenant(g.tenant).ArchiveQueue()
	p := a.rc.Pipeline()
	lenCmd := p.XLen(ctx, q)
	first := p.XRangeN(ctx, q, "-", "+", 1)
	now := p.Time(ctx)
	if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return 0, 0, err
	}
	if msgs := first.Val(); len(msgs) > 0 {
		if ms, _, ok := script.ParseStreamID(msgs[0].ID); ok {
			lag = max(0, now.Val().Sub(time.UnixMilli(int64(ms))))
		}
	}
	return lenCmd.Val(), lag, nil
}

// settle runs reserve+commit on g's workers: n in all as fast as they go
// (rate 0), or paced at rate per second until stop closes. It returns the
// settled count and the errors.
func (a *archiveRun) settle(ctx context.Context, g *group, n int, rate float64, stop <-chan struct{}, settled *atomic.Int64) int64 {
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
		go func(w int) {
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
		}(w)
	}
	wg.Wait()
	close(done)
	return errs.Load()
}

func (a *archiveRun) drain(ctx context.Context, res *ArchiveResult, n int, profile string, profileSecs int) error {
	g, err := a.newGroupNamed(ctx, fmt.Sprintf("bench-%s-archive-drain", a.runID), "shared", a.workers)
	if err != nil {
		return err
	}
	defer g.close()
	a.logf("archive drain: PostgreSQL stopped; settling %d reservations", n)
	a.pg.Stop()
	var settled atomic.Int64
	t0 := time.Now()
	if errs := a.settle(ctx, g, n, 0, nil, &settled); errs > 0 {
		a.logf("archive drain: %d reserve/commit errors", errs)
	}
	a.logf("archive drain: %d settled in %.1fs", settled.Load(), time.Since(t0).Seconds())
	queued, _, err := a.queue(ctx, g)
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
		left, _, err := a.queue(ctx, g)
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
	if err := c.QueryRow(ctx, `SELECT count(*), count(DISTINCT rid) FROM cycles_reservations WHERE tenant_id = $1`,
		g.tenant).Scan(&rows, &distinct); err != nil {
		return err
	}
	res.ArchivedRows, res.ArchivedDupes = rows, rows-distinct
	res.Ledger = append(res.Ledger, g.verify(ctx))
	a.logf("archive drain: %d archived in %.2fs after the first batch (%.0f/s; first batch %.2fs after the restart)",
		queued, res.DrainS, res.DrainRate, res.DrainFirstS)
	return nil
}

func (a *archiveRun) lag(ctx context.Context, res *ArchiveResult, rate float64, d time.Duration) error {
	g, err := a.newGroupNamed(ctx, fmt.Sprintf("bench-%s-archive-lag", a.runID), "shared", a.workers)
	if err != nil {
		return err
	}
	defer g.close()
	a.logf("archive lag: reserve+commit paced at %.0f/s for %s", rate, d)
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
				if _, lag, err := a.queue(ctx, g); err == nil && time.Now().After(warm) {
					samples = append(samples, lag)
				}
			}
		}
	}()
	start := time.Now()
	time.AfterFunc(d, func() { close(stop) })
	errs := a.settle(ctx, g, 0, rate, stop, &settled)
	elapsed := time.Since(start)
	<-sampled
	res.LagTarget, res.LagWindowS, res.LagErrors = rate, round3(elapsed.Seconds()), errs
	res.LagAchieved = float64(int64(float64(settled.Load()) / elapsed.Seconds()))
	slices.Sort(samples)
	res.LagSamples = len(samples)
	if len(samples) > 0 {
		pct := func(p float64) int64 { return samples[int(p*float64(len(samples)-1))].Milliseconds() }
		res.LagP50Ms, res.LagP99Ms, res.LagMaxMs = pct(0.50), pct(0.99), samples[len(samples)-1].Milliseconds()
	}
	res.Ledger = append(res.Ledger, g.verify(ctx))
	a.logf("archive lag: %.0f settles/s achieved; lag p50 %d ms, p99 %d ms, max %d ms (%d samples)",
		res.LagAchieved, res.LagP50Ms, res.LagP99Ms, res.LagMaxMs, res.LagSamples)
	return nil
}

func (a *archiveRun) plateau(ctx context.Context, res *ArchiveResult, rate float64, d, hot time.Duration) error {
	g, err := a.newGroupNamed(ctx, fmt.Sprintf("bench-%s-archive-plateau", a.runID), "shared", a.workers)
	if err != nil {
		return err
	}
	defer g.close()
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
				queued, _, qerr := a.queue(ctx, g)
				if err != nil || qerr != nil {
					continue
				}
				s := MemorySample{AtS: round3(time.Since(start).Seconds()), Used: used, Settled: settled.Load(), Queued: queued}
				s.Keys, s.Expired = a.keyCounts(ctx)
				s.Indexed = a.rc.ZCard(ctx, keys.Tenant(g.tenant).Created()).Val()
				res.Memory = append(res.Memory, s)
				a.logf("  t=%5.0fs used_memory %7.2f MB (+%6.2f MB)  settled %7d  queued %5d  keys %7d  expired %7d  index %7d", s.AtS,
					float64(used)/1e6, float64(used-base)/1e6, s.Settled, s.Queued, s.Keys, s.Expired, s.Indexed)
			}
		}
	}()
	time.AfterFunc(d, func() { close(stop) })
	errs := a.settle(ctx, g, 0, rate, stop, &settled)
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
	res.Ledger = append(res.Ledger, g.verify(ctx))
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
