package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cyclesgo/cycles-go/bench"
)

// GOGCResult is the outcome of `cycles-bench gogc`: cyclesd's CPU per
// operation for one cell (reserve at 50 clients by default) with cyclesd
// started under each GOGC value in turn, the values interleaved round by
// round on one redis-server, so a drift of the (shared) machine's load
// falls on every value alike. Issue 24: the cost of Go's default GOGC=100
// against the GOGC=400 cyclesd used to set.
type GOGCResult struct {
	CPUs         int     `json:"cpus"`
	LoadAvgStart string  `json:"loadavg_start"`
	LoadAvgEnd   string  `json:"loadavg_end"`
	Op           string  `json:"op"`
	Shape        string  `json:"shape"`
	Clients      int     `json:"clients"`
	DurationS    float64 `json:"duration_s"`
	Rounds       int     `json:"rounds"`
	// Passes are every (round, value) measurement in the order run.
	Passes []GOGCPass `json:"passes"`
	// Values are the per-value medians over the rounds.
	Values []GOGCPass `json:"medians"`
	// ServerCPUChange is the last value's median cyclesd CPU per operation
	// relative to the first value's (-0.15: 15% less CPU per operation).
	ServerCPUChange float64 `json:"server_cpu_per_op_change"`
}

// GOGCPass is one cyclesd process's cell at one GOGC value (or the medians
// of a value's passes).
type GOGCPass struct {
	Round      int     `json:"round,omitempty"`
	GOGC       string  `json:"gogc"`
	Throughput float64 `json:"throughput_per_s"`
	P50Ms      float64 `json:"p50_ms"`
	// ServerMsPerKop is cyclesd's CPU per 1,000 operations, RedisMsPerKop
	// redis-server's (the control: GOGC does not touch it).
	ServerMsPerKop float64 `json:"server_ms_per_kop"`
	RedisMsPerKop  float64 `json:"redis_ms_per_kop"`
	ServerCores    float64 `json:"server_cores"`
	// PeakRSSKB is cyclesd's peak resident set (VmHWM) at the end of the
	// pass: what the CPU is traded against.
	PeakRSSKB int64 `json:"peak_rss_kb"`
	Errors    int64 `json:"errors"`
}

func gogcMain(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("cycles-bench gogc", flag.ContinueOnError)
	values := fs.String("values", "100,400", "GOGC values of cyclesd to compare, comma-separated (the first is the reference)")
	rounds := fs.Int("rounds", 3, "rounds; each runs every value once, in alternating order")
	clients := fs.Int("clients", 50, "concurrent clients")
	shape := fs.String("shape", "shared", "budget shape: shared or independent")
	duration := fs.Duration("duration", 5*time.Second, "measured window per pass")
	warmup := fs.Duration("warmup", time.Second, "warm-up per pass (not measured)")
	var tf toolFlags
	tf.register(fs, "bench/results/gogc.json")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var vals []string
	for _, v := range strings.Split(*values, ",") {
		v = strings.TrimSpace(v)
		if n, err := strconv.Atoi(v); (err != nil || n <= 0) && v != "off" {
			return fmt.Errorf("-values: %q is not a positive integer or off", v)
		}
		vals = append(vals, v)
	}
	if len(vals) < 2 || *rounds < 1 || *clients < 1 {
		return fmt.Errorf("gogc: need at least two -values, -rounds >= 1 and -clients >= 1")
	}
	if *shape != "shared" && *shape != "independent" {
		return fmt.Errorf("-shape: %q is not shared or independent", *shape)
	}
	// One redis-server for every pass; each pass starts its own cyclesd.
	dir, err := os.MkdirTemp("", "cycles-bench-redis-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	rs, addr, err := startRedis(dir)
	if err != nil {
		return err
	}
	defer rs.stop(15 * time.Second)

	res := &GOGCResult{CPUs: runtime.NumCPU(), LoadAvgStart: loadAvg(), Op: "reserve", Shape: *shape, Clients: *clients,
		DurationS: duration.Seconds(), Rounds: *rounds}
	for r := 1; r <= *rounds; r++ {
		order := slices.Clone(vals)
		if r%2 == 0 {
			slices.Reverse(order)
		}
		for _, v := range order {
			p, err := gogcPass(ctx, addr, tf.bin, v, *shape, *clients, *warmup, *duration)
			if err != nil {
				return fmt.Errorf("round %d, GOGC=%s: %w", r, v, err)
			}
			p.Round = r
			res.Passes = append(res.Passes, p)
			if !tf.quiet {
				fmt.Fprintf(os.Stderr, "round %d GOGC=%-4s %8.0f reserves/s  p50 %6.3f ms  cyclesd %6.1f ms CPU per 1k ops (%.2f cores), redis %6.1f; cyclesd peak RSS %d MB; errors %d\n",
					r, v, p.Throughput, p.P50Ms, p.ServerMsPerKop, p.ServerCores, p.RedisMsPerKop, p.PeakRSSKB/1024, p.Errors)
			}
		}
	}
	res.Values = gogcMedians(vals, res.Passes)
	if first, last := res.Values[0].ServerMsPerKop, res.Values[len(res.Values)-1].ServerMsPerKop; first > 0 {
		res.ServerCPUChange = round3((last - first) / first)
	}
	res.LoadAvgEnd = loadAvg()
	if err := saveResult(tf.out, res); err != nil {
		return err
	}
	fmt.Printf("\nmedians of %d rounds, %s/%s/%d clients, %s per pass:\n", *rounds, res.Op, *shape, *clients, *duration)
	for _, m := range res.Values {
		fmt.Printf("  GOGC=%-4s %8.0f reserves/s  cyclesd %6.1f ms CPU per 1k ops  redis %6.1f  cyclesd peak RSS %d MB\n",
			m.GOGC, m.Throughput, m.ServerMsPerKop, m.RedisMsPerKop, m.PeakRSSKB/1024)
	}
	fmt.Printf("cyclesd CPU per op, GOGC=%s vs GOGC=%s: %+.1f%%\n", vals[len(vals)-1], vals[0], 100*res.ServerCPUChange)
	for _, p := range res.Passes {
		if total := p.Throughput*res.DurationS + float64(p.Errors); total > 0 && float64(p.Errors) > maxErrorRate*total {
			return fmt.Errorf("round %d, GOGC=%s: %d errors", p.Round, p.GOGC, p.Errors)
		}
	}
	return nil
}

// gogcPass starts cyclesd with GOGC=value on the Redis at addr, measures one
// cell, checks its ledger and stops cyclesd.
func gogcPass(ctx context.Context, addr, bin, value, shape string, clients int, warmup, window time.Duration) (GOGCPass, error) {
	cfg := &config{redisAddr: addr, adminKey: defaultAdminKey, cyclesdBin: bin, allocated: 1_000_000_000_000, conns: 4,
		serverEnv: []string{"GOGC=" + value}}
	b, cleanup, err := startTool(ctx, cfg, true)
	if err != nil {
		return GOGCPass{}, err
	}
	defer cleanup()
	// What the started process really has (a later GOGC in its
	// environment wins over one inherited from this process's).
	if got := procEnv(b.pids.server, "GOGC"); got != value {
		return GOGCPass{}, fmt.Errorf("cyclesd runs with GOGC=%q, want %q", got, value)
	}
	g, err := b.newGroup(ctx, shape, clients)
	if err != nil {
		return GOGCPass{}, err
	}
	defer g.close()
	ph := runPhase(ctx, clients, warmup, window, b.pids, g.opReserve)
	c := ph.cell("reserve", shape, clients)
	if chk := g.verify(ctx); chk.Mismatches > 0 {
		return GOGCPass{}, fmt.Errorf("ledger mismatch: %v", chk.Details)
	}
	p := GOGCPass{GOGC: value, Throughput: c.Throughput, P50Ms: c.Latency.P50, Errors: c.Errors, PeakRSSKB: peakRSSKB(b.pids.server)}
	if c.CPU != nil {
		p.ServerMsPerKop, p.RedisMsPerKop, p.ServerCores = round3(c.CPU.Server), round3(c.CPU.Redis), round3(c.CPU.ServerCores)
	}
	return p, nil
}

// gogcMedians are each value's per-figure medians over its passes.
func gogcMedians(vals []string, passes []GOGCPass) []GOGCPass {
	out := make([]GOGCPass, 0, len(vals))
	for _, v := range vals {
		var tput, p50, srv, rds, cores, rss []float64
		m := GOGCPass{GOGC: v}
		for _, p := range passes {
			if p.GOGC != v {
				continue
			}
			tput, p50, srv, rds = append(tput, p.Throughput), append(p50, p.P50Ms), append(srv, p.ServerMsPerKop), append(rds, p.RedisMsPerKop)
			cores, rss = append(cores, p.ServerCores), append(rss, float64(p.PeakRSSKB))
			m.Errors += p.Errors
		}
		m.Throughput, m.P50Ms, m.ServerMsPerKop = round3(bench.MedianOf(tput)), round3(bench.MedianOf(p50)), round3(bench.MedianOf(srv))
		m.RedisMsPerKop, m.ServerCores, m.PeakRSSKB = round3(bench.MedianOf(rds)), round3(bench.MedianOf(cores)), int64(bench.MedianOf(rss))
		out = append(out, m)
	}
	return out
}

// procEnv is the value of name in pid's environment (/proc/<pid>/environ).
func procEnv(pid int, name string) string {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return ""
	}
	v := ""
	for _, kv := range strings.Split(string(raw), "\x00") {
		if rest, ok := strings.CutPrefix(kv, name+"="); ok {
			v = rest
		}
	}
	return v
}

// peakRSSKB is VmHWM of pid (/proc/<pid>/status), 0 if unknown.
func peakRSSKB(pid int) int64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return n
		}
	}
	return 0
}
