package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/cyclesgo/cycles-go/bench"
	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/store/redisinfo"
	"github.com/cyclesgo/cycles-go/test/redistest"
)

type config struct {
	redisAddr       string
	cyclesdAddr     string
	httpAddr        string
	adminKey        string
	cyclesdBin      string
	serverArgs      []string
	serverEnv       []string
	clients         []int
	shapes          []string
	ops             []string
	duration        time.Duration
	warmup          time.Duration
	conns           int
	ceilingConns    int
	backlog         int
	streamChurn     int
	out             string
	profileCell     string
	profileOut      string
	quiet           bool
	allocated       int64
	selfProfile     string
	ceilingInFlight int
	physicalConns   int
	memory          int
}

const defaultAdminKey = "cycles-bench-admin-key-0123456789"

var allOps = []string{"reserve", "commit", "lifecycle", "decide", "ratelimit", "http-reserve", "connect"}

// rateAlgorithm is the limiter of the ratelimit phase: the O(1) sliding
// window with a limit no run reaches, so every check does its full work
// (read, decide, write) and is allowed.
const rateAlgorithm = cyclesv1.Algorithm_ALGORITHM_SLIDING_WINDOW

func parseRunFlags(args []string) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("cycles-bench", flag.ContinueOnError)
	var clients, shapes, ops, serverArgs, serverEnv string
	fs.StringVar(&c.redisAddr, "redis-addr", "", "target this Redis (default: start a private redis-server)")
	fs.StringVar(&c.cyclesdAddr, "cyclesd-addr", "", "target this cyclesd (default: start one on the Redis); needs -admin-key")
	fs.StringVar(&c.httpAddr, "cyclesd-http-addr", "", "HTTP listener of the target cyclesd (-cyclesd-addr), for http-reserve and connect")
	fs.StringVar(&c.adminKey, "admin-key", defaultAdminKey, "admin key of the target cyclesd")
	fs.StringVar(&c.cyclesdBin, "cyclesd", "", "cyclesd binary to start (default: bin/cyclesd, else go build)")
	fs.StringVar(&serverArgs, "server-args", "", "extra cyclesd flags, space separated (experiments)")
	fs.StringVar(&serverEnv, "server-env", "", "extra cyclesd environment, space separated K=V (e.g. GOGC=200)")
	fs.StringVar(&clients, "clients", "1,10,50,200", "concurrent client counts")
	fs.StringVar(&shapes, "shapes", "shared,independent", "budget shapes")
	fs.StringVar(&ops, "ops", strings.Join(allOps, ","), "operations")
	fs.DurationVar(&c.duration, "duration", 3*time.Second, "measured window per cell")
	fs.DurationVar(&c.warmup, "warmup", 500*time.Millisecond, "warm-up per cell (not measured)")
	fs.IntVar(&c.conns, "conns", 4, "gRPC connections per group (at most one per client); clients share them round-robin, as agents behind one HTTP/2 client would")
	fs.IntVar(&c.ceilingConns, "ceiling-conns", 50, "Redis connections of the raw-script ceiling")
	fs.IntVar(&c.ceilingInFlight, "ceiling-inflight", 0, "script executions in flight for the ceiling (0: internal/script's default, -1: no pipelining)")
	fs.IntVar(&c.physicalConns, "physical-conns", 50, "connections of the physical-limit row (a minimal 3-scope reserve-like script; 0: skip)")
	fs.IntVar(&c.memory, "memory", 5000, "reserve+commit lifecycles of the Redis memory cell (0: skip)")
	fs.IntVar(&c.backlog, "backlog", 100_000, "expired reservations to drain (0: skip)")
	fs.IntVar(&c.streamChurn, "stream-churn", 8, "goroutines of another tenant churning WatchEvents streams during the reserve/stream-churn cell (0: skip)")
	fs.StringVar(&c.out, "out", "bench/results/latest.json", "result file")
	fs.StringVar(&c.profileCell, "profile", "", "CPU-profile the server during one cell, op/shape/clients (e.g. reserve/shared/50); starts the server in serve mode")
	fs.StringVar(&c.profileOut, "profile-out", "bench/results/cyclesd.cpu.pprof", "where -profile writes the profile")
	fs.BoolVar(&c.quiet, "q", false, "no progress lines")
	fs.StringVar(&c.selfProfile, "client-cpuprofile", "", "write a CPU profile of the load generator itself here")
	fs.Int64Var(&c.allocated, "allocated", 1_000_000_000_000, "allocation of every budget (amounts of 16+ digits take int64.lua's digit-wise path)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	for _, s := range strings.Split(clients, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("-clients: %q is not a positive integer", s)
		}
		c.clients = append(c.clients, n)
	}
	for _, s := range strings.Split(shapes, ",") {
		s = strings.TrimSpace(s)
		if s != "shared" && s != "independent" {
			return nil, fmt.Errorf("-shapes: %q is not shared or independent", s)
		}
		c.shapes = append(c.shapes, s)
	}
	for _, s := range strings.Split(ops, ",") {
		s = strings.TrimSpace(s)
		if !slices.Contains(allOps, s) {
			return nil, fmt.Errorf("-ops: %q is not one of %v", s, allOps)
		}
		c.ops = append(c.ops, s)
	}
	if slices.Contains(c.ops, "commit") && !slices.Contains(c.ops, "reserve") {
		return nil, fmt.Errorf("-ops: commit needs reserve (it commits the reserve phase's reservations)")
	}
	c.serverArgs = strings.Fields(serverArgs)
	c.serverEnv = strings.Fields(serverEnv)
	if c.cyclesdAddr != "" && c.redisAddr == "" {
		return nil, fmt.Errorf("-cyclesd-addr needs -redis-addr (the ceiling runs against the same Redis)")
	}
	if (slices.Contains(c.ops, "http-reserve") || slices.Contains(c.ops, "connect")) && c.cyclesdAddr != "" && c.httpAddr == "" {
		return nil, fmt.Errorf("-ops http-reserve/connect with -cyclesd-addr needs -cyclesd-http-addr")
	}
	if c.profileCell != "" && c.cyclesdAddr != "" {
		return nil, fmt.Errorf("-profile needs the server started by the tool")
	}
	return c, nil
}

// runner is one benchmark run.
type runner struct {
	cfg       *config
	runID     string
	pids      pids
	adminConn *grpc.ClientConn
	admin     cyclesv1.AdminServiceClient
	pprofAddr string
	log       io.Writer
	// httpBase and httpClient serve the http-reserve phase.
	httpBase   string
	httpClient *http.Client
}

func (b *runner) dial() (*grpc.ClientConn, error) {
	return grpc.NewClient(b.cfg.cyclesdAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

func (b *runner) logf(format string, args ...any) {
	fmt.Fprintf(b.log, format+"\n", args...)
}

func runMain(ctx context.Context, args []string) error {
	cfg, err := parseRunFlags(args)
	if err != nil {
		return err
	}
	b := &runner{cfg: cfg, log: os.Stderr}
	if cfg.quiet {
		b.log = io.Discard
	}
	if cfg.selfProfile != "" {
		f, err := os.Create(cfg.selfProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
	}
	res, err := b.run(ctx)
	if err != nil {
		return err
	}
	if dir := filepath.Dir(cfg.out); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	if err := res.Save(cfg.out); err != nil {
		return err
	}
	writeReport(os.Stdout, res)
	fmt.Fprintf(os.Stdout, "\nresult: %s\n", cfg.out)
	if len(res.Failed) > 0 {
		return fmt.Errorf("run failed: %s", strings.Join(res.Failed, "; "))
	}
	return nil
}

// setup starts (or attaches to) Redis and cyclesd.
func (b *runner) setup(ctx context.Context) (cleanup func(), err error) {
	var procs []*proc
	cleanup = func() {
		for i := len(procs) - 1; i >= 0; i-- {
			procs[i].stop(15 * time.Second)
		}
	}
	defer func() {
		if err != nil {
			cleanup()
		}
	}()
	cfg := b.cfg
	if cfg.redisAddr == "" {
		dir, err := os.MkdirTemp("", "cycles-bench-redis-")
		if err != nil {
			return cleanup, err
		}
		p, addr, err := startRedis(dir)
		if err != nil {
			return cleanup, err
		}
		procs = append(procs, p)
		cfg.redisAddr = addr
		b.pids.redis = p.pid()
		prev := cleanup
		cleanup = func() { prev(); _ = os.RemoveAll(dir) }
	} else {
		b.pids.redis = localRedisPID(ctx, cfg.redisAddr)
	}
	if cfg.cyclesdAddr == "" {
		port, err := redistest.Port()
		if err != nil {
			return cleanup, err
		}
		cfg.cyclesdAddr = fmt.Sprintf("127.0.0.1:%d", port)
		httpListen := ""
		if slices.Contains(cfg.ops, "http-reserve") || slices.Contains(cfg.ops, "connect") {
			hport, err := redistest.Port()
			if err != nil {
				return cleanup, err
			}
			cfg.httpAddr = fmt.Sprintf("127.0.0.1:%d", hport)
			httpListen = cfg.httpAddr
		}
		// The sweeper runs once at start and then only when triggered, so
		// the backlog phase times one complete drain (TriggerSweep) instead
		// of racing the periodic sweep.
		// The per-key guard (on by default, 1,000 calls/s per key) would
		// cap the load a handful of bench keys can offer: the bench
		// measures the ledger, so it turns the guard off; -server-args
		// "-guard-policy=..." measures with one (a later flag wins).
		// The all-tenant feed's pacing stays at its defaults: the feed
		// cell's sweep (100,000 expirations) fits in -watch-feed-burst.
		args := append([]string{"-listen", cfg.cyclesdAddr, "-http-listen=" + httpListen, "-redis-addrs", cfg.redisAddr, "-admin-key", cfg.adminKey,
			"-log-format", "json", "-sweeper-interval", "1h", "-guard-policy="}, cfg.serverArgs...)
		var p *proc
		if cfg.profileCell != "" {
			pport, err := redistest.Port()
			if err != nil {
				return cleanup, err
			}
			b.pprofAddr = fmt.Sprintf("127.0.0.1:%d", pport)
			self, err := os.Executable()
			if err != nil {
				return cleanup, err
			}
			p, err = startProc("cyclesd (serve mode)", self, append([]string{"serve", "-pprof-addr", b.pprofAddr, "--"}, args...), cfg.serverEnv)
			if err != nil {
				return cleanup, err
			}
		} else {
			bin, err := b.cyclesdBinary()
			if err != nil {
				return cleanup, err
			}
			p, err = startProc("cyclesd", bin, args, cfg.serverEnv)
			if err != nil {
				return cleanup, err
			}
		}
		procs = append(procs, p)
		b.pids.server = p.pid()
		if err := waitServing(ctx, cfg.cyclesdAddr, p); err != nil {
			return cleanup, err
		}
		cfg.serverArgs = args
	} else if err := waitServing(ctx, cfg.cyclesdAddr, nil); err != nil {
		return cleanup, err
	}
	conn, err := b.dial()
	if err != nil {
		return cleanup, err
	}
	prev := cleanup
	cleanup = func() { _ = conn.Close(); prev() }
	b.adminConn = conn
	if cfg.httpAddr != "" {
		b.httpBase = "http://" + cfg.httpAddr
		maxClients := 1
		for _, n := range cfg.clients {
			maxClients = max(maxClients, n)
		}
		b.httpClient = newHTTPClient(maxClients)
	}
	b.admin = cyclesv1.NewAdminServiceClient(conn)
	b.pids.stats = redis.NewClient(&redis.Options{Addr: cfg.redisAddr, PoolSize: 1})
	prev2 := cleanup
	cleanup = func() { _ = b.pids.stats.Close(); prev2() }
	return cleanup, nil
}

// cyclesdBinary is -cyclesd, else bin/cyclesd, else a fresh go build.
func (b *runner) cyclesdBinary() (string, error) {
	if b.cfg.cyclesdBin != "" {
		return b.cfg.cyclesdBin, nil
	}
	if st, err := os.Stat("bin/cyclesd"); err == nil && !st.IsDir() {
		return "bin/cyclesd", nil
	}
	dir, err := os.MkdirTemp("", "cycles-bench-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "cyclesd")
	b.logf("building cyclesd into %s", bin)
	out, err := exec.Command("go", "build", "-o", bin, "github.com/cyclesgo/cycles-go/cmd/cyclesd").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build cyclesd: %w\n%s", err, out)
	}
	return bin, nil
}

// localRedisPID is the pid of a Redis on this machine (INFO process_id), so
// its CPU time can be attributed; 0 if it is remote.
func localRedisPID(ctx context.Context, addr string) int {
	host, _, _ := strings.Cut(addr, ":")
	if host != "127.0.0.1" && host != "localhost" {
		return 0
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(redisinfo.Field(info, "process_id"))
	return pid
}

func newRunID() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// run performs the whole benchmark.
func (b *runner) run(ctx context.Context) (*bench.Result, error) {
	b.runID = newRunID()
	cleanup, err := b.setup(ctx)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	cfg := b.cfg
	res := &bench.Result{
		Version:   bench.ResultVersion,
		StartedAt: time.Now().UTC().Format(time.RFC3339),
		Commit:    gitCommit(),
		Machine:   machine(ctx, cfg.redisAddr),
		Config: bench.Config{
			Clients: cfg.clients, Shapes: cfg.shapes, Ops: cfg.ops,
			DurationS: cfg.duration.Seconds(), WarmupS: cfg.warmup.Seconds(),
			Conns: cfg.conns, CeilingConns: cfg.ceilingConns, Backlog: cfg.backlog, Allocated: cfg.allocated,
			RateAlgorithm:    rateAlgorithm.String(),
			StartedProcesses: b.pids.server > 0,
			ServerArgs:       redactArgs(append(append([]string(nil), cfg.serverArgs...), cfg.serverEnv...)),
			ServerGOGC:       b.serverGOGC(),
		},
	}
	policy := "bench-" + b.runID
	if slices.Contains(cfg.ops, "ratelimit") {
		if err := b.ensurePolicy(ctx, &cyclesv1.Policy{Name: policy, Algorithm: rateAlgorithm, Limit: 100_000_000, WindowMs: 60_000}); err != nil {
			return nil, err
		}
	}
	b.logf("cycles-bench %s: cyclesd %s, redis %s, %v clients x %v, %v per cell", b.runID, cfg.cyclesdAddr, cfg.redisAddr, cfg.clients, cfg.shapes, cfg.duration)
	for _, clients := range cfg.clients {
		for _, shape := range cfg.shapes {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			g, err := b.newGroup(ctx, shape, clients)
			if err != nil {
				return nil, err
			}
			for _, op := range cfg.ops {
				var fn opFunc
				switch op {
				case "reserve":
					fn = g.opReserve
				case "commit":
					fn = g.opCommitAfter(time.Now().Add(cfg.warmup))
				case "lifecycle":
					fn = g.opLifecycle
				case "decide":
					fn = g.opDecide
				case "ratelimit":
					fn = g.opRateLimit(policy)
				case "connect":
					fn = g.opConnectReserve
				case "http-reserve":
					fn = g.opHTTPReserve
				}
				prof := b.startProfile(op, shape, clients)
				ph := runPhase(ctx, clients, cfg.warmup, cfg.duration, b.pids, fn)
				if err := prof(); err != nil {
					b.logf("profile: %v", err)
				}
				c := ph.cell(op, shape, clients)
				if op == "lifecycle" {
					c.Note = "one op = reserve + commit"
				}
				if op == "connect" {
					c.Note = "one op = reserve as Connect JSON over HTTP/1.1 (transcoded onto gRPC in process)"
				}
				if op == "http-reserve" {
					c.Note = "reserve over the Cycles HTTP/JSON wire (POST /v1/reservations)"
				}
				if op == "commit" && ph.window < cfg.duration*9/10 {
					c.Note = "ran out of reservations before the window ended; measured over the time used"
				}
				res.Cells = append(res.Cells, c)
				b.logf("  %-9s %-11s %3d clients: %8.0f/s  p50 %6.3f  p95 %6.3f  p99 %7.3f ms  errors %d", op, shape, clients,
					c.Throughput, c.Latency.P50, c.Latency.P95, c.Latency.P99, c.Errors)
			}
			chk := g.verify(ctx)
			g.close()
			res.Ledger = append(res.Ledger, chk)
			if chk.Mismatches > 0 {
				b.logf("  LEDGER MISMATCH %s: %v", chk.Group, chk.Details)
			}
		}
	}
	if cfg.streamChurn > 0 {
		c, chk, err := b.runStreamChurn(ctx, cfg.streamChurn)
		if err != nil {
			return nil, fmt.Errorf("stream churn: %w", err)
		}
		res.Cells = append(res.Cells, c)
		res.Ledger = append(res.Ledger, chk)
		b.logf("  %-9s %-12s %3d clients: %8.0f/s  p50 %6.3f  p95 %6.3f  p99 %7.3f ms  errors %d  (%s)", c.Op, c.Shape, c.Clients,
			c.Throughput, c.Latency.P50, c.Latency.P95, c.Latency.P99, c.Errors, c.Note)
		if chk.Mismatches > 0 {
			b.logf("  LEDGER MISMATCH %s: %v", chk.Group, chk.Details)
		}
	}
	if cfg.ceilingConns > 0 {
		b.logf("ceiling: %s via internal/script, %d connections", ceilingScript, cfg.ceilingConns)
		ceil, chk, err := b.runCeiling(ctx)
		if err != nil {
			return nil, fmt.Errorf("ceiling: %w", err)
		}
		res.Ceiling = ceil
		res.Ledger = append(res.Ledger, chk)
		b.logf("  ceiling %8.0f/s  p50 %6.3f ms; one connection p50 %6.3f ms", ceil.Throughput, ceil.Latency.P50, ceil.Single.P50)
	}
	if cfg.physicalConns > 0 {
		b.logf("physical limit: minimal 3-scope reserve-like script, %d connections", cfg.physicalConns)
		ph, chk, err := b.runPhysical(ctx, cfg.physicalConns)
		if err != nil {
			return nil, fmt.Errorf("physical limit: %w", err)
		}
		res.Physical = ph
		res.Ledger = append(res.Ledger, chk)
		b.logf("  physical %8.0f/s  p50 %6.3f ms", ph.Throughput, ph.Latency.P50)
	}
	if cfg.memory > 0 {
		b.logf("memory: %d reservations through the service, used_memory while active and once committed", cfg.memory)
		m, chk, err := b.runMemory(ctx, cfg.memory)
		if err != nil {
			return nil, fmt.Errorf("memory: %w", err)
		}
		res.Memory = m
		res.Ledger = append(res.Ledger, chk)
		b.logf("  %.0f B per active, %.0f B per settled reservation; one record %d B (%s) active, %d B (%s) settled",
			m.ActiveBytes, m.SettledBytes, m.RecordActiveBytes, m.RecordActiveEncoding, m.RecordSettledBytes, m.RecordSettledEncoding)
	}
	if cfg.backlog > 0 {
		b.logf("backlog: seeding %d reservations (ttl 1 s) through the service", cfg.backlog)
		bl, chk, err := b.runBacklog(ctx, cfg.backlog)
		if err != nil {
			return nil, fmt.Errorf("backlog: %w", err)
		}
		res.Backlog = bl
		res.Ledger = append(res.Ledger, chk)
		b.logf("  seeded %d in %.1f s; drained %d in %.2f s (%.0f/s)", bl.Reservations, bl.SeedS, bl.Expired, bl.DrainS, bl.Rate)
	}
	finish(res)
	return res, nil
}

// startProfile fetches a CPU profile of the server during the cell named by
// -profile (after the warm-up, for the measured window); the returned func
// waits for it and writes the file.
func (b *runner) startProfile(op, shape string, clients int) func() error {
	if b.pprofAddr == "" || b.cfg.profileCell != fmt.Sprintf("%s/%s/%d", op, shape, clients) {
		return func() error { return nil }
	}
	secs := int(b.cfg.duration.Seconds())
	if secs < 1 {
		secs = 1
	}
	fetch := func(kind, out string) error {
		resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/%s?seconds=%d", b.pprofAddr, kind, secs))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			return err
		}
		f, err := os.Create(out)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, resp.Body)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			b.logf("  server %s profile of %s/%s/%d: %s", kind, op, shape, clients, out)
		}
		return err
	}
	done := make(chan error, 2)
	go func() {
		time.Sleep(b.cfg.warmup)
		done <- fetch("profile", b.cfg.profileOut)
	}()
	go func() {
		time.Sleep(b.cfg.warmup)
		// Allocations over the same window (a delta profile).
		done <- fetch("allocs", strings.TrimSuffix(b.cfg.profileOut, ".pprof")+".allocs.pprof")
	}()
	return func() error {
		err1, err2 := <-done, <-done
		if err1 != nil {
			return err1
		}
		return err2
	}
}

// serverGOGC is the GOGC of the cyclesd the run started: the last GOGC in
// -server-env, else this process's environment (which the child inherits),
// else Go's default that cyclesd keeps. Empty when the run targets a
// cyclesd it did not start.
func (b *runner) serverGOGC() string {
	if b.pids.server == 0 {
		return ""
	}
	v := os.Getenv("GOGC")
	for _, e := range b.cfg.serverEnv {
		if g, ok := strings.CutPrefix(e, "GOGC="); ok {
			v = g
		}
	}
	if v == "" {
		v = "100"
	}
	return v
}

// redactArgs hides the admin key in the server arguments kept in a result.
func redactArgs(args []string) []string {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "-admin-key" {
			args[i+1] = "(redacted)"
		}
	}
	return args
}

func gitCommit() string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
		c += "-dirty"
	}
	return c
}

func machine(ctx context.Context, redisAddr string) bench.Machine {
	m := bench.Machine{NumCPU: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), GoVersion: runtime.Version()}
	m.Hostname, _ = os.Hostname()
	if raw, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(raw), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if raw, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(raw))
	}
	c := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer c.Close()
	if info, err := c.Info(ctx, "server").Result(); err == nil {
		m.Redis = redisinfo.Field(info, "redis_version")
	}
	return m
}
