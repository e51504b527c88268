package abuse

// The shared harness of the abuse suite. Its whole API:
//
//	d := Start(t, flags...)        // a fresh redis-server + cyclesd (gRPC, HTTP, /metrics)
//	d.Metric(t, name, labels...)   // a Prometheus metric on /metrics, summed over matching series
//	d.RSSKB(t) / d.PeakKB(t)       // VmRSS / VmHWM of the cyclesd process, in kB
//	b := d.Tenant(t, "b")          // a provisioned tenant whose reserves are the probe
//	f := d.UnderAttack(t, Attack{Name, Duration, Run})
//
// UnderAttack is what every test calls: it measures tenant b's reserve
// latency at rest (baseline), resets the peak-RSS counter, runs the attack
// for Duration while b keeps reserving at a steady pace and /healthz plus a
// gRPC health check on fresh connections are polled, then asserts the
// issue-23 bounds (peak RSS growth < 64 MB, b's reserves all succeed with
// p99 <= 2x baseline p99 + 10 ms, every health poll answered; the latency
// bounds get one more attempt on a noisy machine) and logs the figures
// (docs/limits.md records them). Attacks that burn CPU run in a process of
// their own (attacker_test.go). The test then checks the metric of
// the connection-level limit that stopped its attack.
//
// Attack.Run gets a context that ends when the attack must stop; it must
// return promptly after that, having closed every socket it opened. Keep
// attacks short (seconds) and bounded in connections: the whole suite runs
// in `make test` on a 2-core machine.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/test/crash/cyclesdtest"
	"github.com/cyclesgo/cycles-go/test/redistest"
)

// Bounds every attack is held to (issue 23's acceptance).
const (
	MaxRSSGrowthKB = 64 << 10              // peak RSS may grow by less than 64 MB
	P99Slack       = 10 * time.Millisecond // b's p99 <= 2 x baseline + P99Slack
	probeEvery     = 5 * time.Millisecond
	baselineFor    = 1500 * time.Millisecond
	healthEvery    = 250 * time.Millisecond
	healthTimeout  = 2 * time.Second
)

// AttackerIP is the source address attacks dial from: another host as far as
// cyclesd's per-peer limits can tell (the probe tenant and the health checks
// come from 127.0.0.1). Linux routes all of 127.0.0.0/8 to loopback.
var AttackerIP = net.IPv4(127, 0, 0, 2)

// DialAttacker opens a TCP connection from AttackerIP to addr.
func DialAttacker(ctx context.Context, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: AttackerIP}}
	return d.DialContext(ctx, "tcp", addr)
}

// Daemon is a running cyclesd with its own redis-server.
type Daemon struct {
	*cyclesdtest.Daemon // Addr (gRPC), MetricsAddr, PID, Conn, Output
	HTTPAddr            string
	Redis               *redistest.Server

	conn   *grpc.ClientConn
	mu     sync.Mutex
	tenant map[string]*Tenant
}

// Start runs a fresh redis-server and cyclesd on it with the gRPC, HTTP and
// metrics listeners on free loopback ports; flags are extra cyclesd flags.
// Both processes are killed at cleanup.
func Start(t *testing.T, flags ...string) *Daemon {
	t.Helper()
	srv := redistest.Start(t)
	httpAddr := fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t))
	args := append([]string{"-http-listen", httpAddr, "-health-interval", "200ms"}, flags...)
	d := &Daemon{Daemon: cyclesdtest.Start(t, binary, srv.Addr, args...), HTTPAddr: httpAddr, Redis: srv, tenant: map[string]*Tenant{}}
	d.WaitServing(t)
	d.conn = d.Conn(t)
	return d
}

// ---- process memory --------------------------------------------------------

// procKB reads a field of /proc/<pid>/status (VmRSS, VmHWM) in kB.
func procKB(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			return strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// cpuTime is the CPU time (user + system) cyclesd has used.
func cpuTime(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name (which ends with ')'): utime and stime
	// are the 12th and 13th, in clock ticks (100 per second on Linux).
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * 10 * time.Millisecond
}

// RSSKB is cyclesd's resident set size now.
func (d *Daemon) RSSKB(t *testing.T) int64 { return d.statusKB(t, "VmRSS") }

// PeakKB is cyclesd's peak resident set size (since start or the last
// resetPeak).
func (d *Daemon) PeakKB(t *testing.T) int64 { return d.statusKB(t, "VmHWM") }

// statusKB is one kB field of cyclesd's /proc status.
func (d *Daemon) statusKB(t *testing.T, field string) int64 {
	t.Helper()
	n, err := procKB(d.PID(), field)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// resetPeak sets VmHWM to the current RSS (clear_refs 5); it reports false
// where the kernel does not allow it (then UnderAttack samples VmRSS).
func (d *Daemon) resetPeak() bool {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", d.PID()), []byte("5"), 0) == nil
}

// ---- metrics ---------------------------------------------------------------

// Metric sums the samples of a Prometheus metric on /metrics whose label set
// contains every one of labels (each written as on the wire, e.g.
// `reason="idle"`); 0 when there is none.
func (d *Daemon) Metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	scrape := d.Metrics(t)
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `(\{[^}]*\})? ([-+0-9.eE]+)$`)
	var sum float64
	for _, m := range re.FindAllStringSubmatch(scrape, -1) {
		if !slices.ContainsFunc(labels, func(l string) bool { return !strings.Contains(m[1], l) }) {
			v, err := strconv.ParseFloat(m[2], 64)
			if err != nil {
				t.Fatalf("metric %s: %v", name, err)
			}
			sum += v
		}
	}
	return sum
}

// ---- the other tenant ------------------------------------------------------

// Tenant is a provisioned tenant whose reserves probe the service.
type Tenant struct {
	Name string
	Key  string
	rt   cyclesv1.RuntimeServiceClient
	mu   sync.Mutex
	n    int
}

// Tenant provisions (once per daemon) a tenant with ample budgets and an API
// key, on a connection opened before any attack.
func (d *Daemon) Tenant(t *testing.T, name string) *Tenant {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	if tn, ok := d.tenant[name]; ok {
		return tn
	}
	key := cyclesdtest.Provision(t, d.conn, name,
		cyclesdtest.Budget{Allocated: 1 << 50}, cyclesdtest.Budget{ScopePath: "tenant:" + name + "/workspace:w", Allocated: 1 << 50})
	tn := &Tenant{Name: name, Key: key, rt: cyclesv1.NewRuntimeServiceClient(d.conn)}
	d.tenant[name] = tn
	return tn
}

// Reserve makes one reservation (a fresh idempotency key) and returns how long
// it took.
func (tn *Tenant) Reserve(ctx context.Context) (time.Duration, error) {
	tn.mu.Lock()
	tn.n++
	id := fmt.Sprintf("probe-%d-%d", time.Now().UnixNano(), tn.n)
	tn.mu.Unlock()
	ttl := int64(60_000)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	start := time.Now()
	_, err := tn.rt.CreateReservation(cyclesdtest.KeyCtx(ctx, tn.Key), &cyclesv1.CreateReservationRequest{
		IdempotencyKey: id, Subject: &cyclesv1.Subject{Workspace: "w", Agent: "probe"},
		Action:   &cyclesv1.Action{Kind: "llm.completion", Name: "m"},
		Estimate: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 10}, TtlMs: &ttl,
	})
	return time.Since(start), err
}

// probe reserves every probeEvery until ctx ends and returns the latencies
// and the errors.
func (tn *Tenant) probe(ctx context.Context) ([]time.Duration, []error) {
	var lat []time.Duration
	var errs []error
	tick := time.NewTicker(probeEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return lat, errs
		case <-tick.C:
		}
		d, err := tn.Reserve(context.WithoutCancel(ctx))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		lat = append(lat, d)
	}
}

// p99 is the 99th percentile of lat (0 when empty).
func p99(lat []time.Duration) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	return s[(len(s)*99+99)/100-1]
}

// ---- health on fresh connections -------------------------------------------

// Healthz GETs /healthz on a new TCP connection.
func (d *Daemon) Healthz(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, healthTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.HTTPAddr+"/healthz", nil)
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	res, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return fmt.Errorf("/healthz: %w", err)
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("/healthz: %s", res.Status)
	}
	return nil
}

// GRPCHealth runs grpc.health.v1.Health/Check on a new connection.
func (d *Daemon) GRPCHealth(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, healthTimeout)
	defer cancel()
	c, err := grpc.NewClient(d.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := healthpb.NewHealthClient(c).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		return fmt.Errorf("grpc health on a new connection: %w", err)
	}
	return nil
}

// ---- the attack ------------------------------------------------------------

// Attack is one hostile client.
type Attack struct {
	Name string
	// Duration is how long the attack runs while it is measured (a few
	// seconds; 0: 3 s).
	Duration time.Duration
	// Run attacks until ctx ends, then closes what it opened and returns.
	Run func(ctx context.Context)
}

// Figures are what UnderAttack measured.
type Figures struct {
	RSSBeforeKB, PeakKB int64
	CPU                 time.Duration // cyclesd's CPU time during the attack
	BaseP99, AttackP99  time.Duration
	Probes              int
	// BaseCPU and BaseProbes are cyclesd's CPU time and the probe's reserves
	// during the baseline just before the attack (see AttackCPU).
	BaseCPU        time.Duration
	BaseProbes     int
	ProbeErrors    []error
	HealthFailures []error
	Attempts       int // how many times the attack ran (2: the latency bound got its second attempt)
}

// GrowthKB is the peak RSS growth during the attack.
func (f Figures) GrowthKB() int64 { return f.PeakKB - f.RSSBeforeKB }

// AttackCPU estimates the CPU time the attack itself cost cyclesd: its CPU
// during the attack less the probe's reserves at the CPU each cost at rest
// (idle work such as health probes counts with the probe). Unlike latency,
// it hardly depends on what else the machine runs.
func (f Figures) AttackCPU() time.Duration {
	if f.BaseProbes == 0 {
		return f.CPU
	}
	return f.CPU - f.BaseCPU*time.Duration(f.Probes)/time.Duration(f.BaseProbes)
}

// UnderAttack runs a.Run for a.Duration while probing, asserts the bounds
// and returns the figures. Tenant "probe" is the other tenant. Its baseline
// p99 is the larger of the one measured just before the attack and the one
// just after.
//
// The test machine is shared (2 cores, other builds and suites running), so
// a latency at rest can swing tenfold between two seconds. The latency
// bounds (p99, health checks answering within 2 s) therefore get a second
// attempt of the whole attack when the first misses only them; the memory
// bound, the other tenant's errors and the metrics never do.
func (d *Daemon) UnderAttack(t *testing.T, a Attack) Figures {
	t.Helper()
	if a.Duration <= 0 {
		a.Duration = 3 * time.Second
	}
	var f Figures
	var latency []string
	for attempt := 1; attempt <= 2; attempt++ {
		var hard []string
		f, hard, latency = d.attackOnce(t, a)
		f.Attempts = attempt
		for _, p := range hard {
			t.Errorf("%s: %s", a.Name, p)
		}
		if len(hard) > 0 || len(latency) == 0 {
			return f
		}
		if attempt == 1 {
			t.Logf("%s: latency bound missed (%s); attacking once more", a.Name, strings.Join(latency, "; "))
		}
	}
	for _, p := range latency {
		t.Errorf("%s: %s", a.Name, p)
	}
	return f
}

// attackOnce runs the attack once and returns the figures, the problems no
// retry excuses and the latency problems.
func (d *Daemon) attackOnce(t *testing.T, a Attack) (f Figures, hard, latency []string) {
	t.Helper()
	b := d.Tenant(t, "probe")
	// Warm the path, then the baseline at rest.
	for range 20 {
		if _, err := b.Reserve(context.Background()); err != nil {
			t.Fatalf("probe tenant at rest: %v", err)
		}
	}
	var baseCPU time.Duration
	var baseProbes int
	baseline := func() time.Duration {
		bctx, bcancel := context.WithTimeout(context.Background(), baselineFor)
		cpu0 := cpuTime(d.PID())
		baseLat, baseErrs := b.probe(bctx)
		baseCPU, baseProbes = cpuTime(d.PID())-cpu0, len(baseLat)
		bcancel()
		if len(baseErrs) > 0 {
			t.Fatalf("probe tenant at rest: %v", baseErrs[0])
		}
		return p99(baseLat)
	}
	f = Figures{BaseP99: baseline(), RSSBeforeKB: d.RSSKB(t)}
	f.BaseCPU, f.BaseProbes = baseCPU, baseProbes
	hwm := d.resetPeak()
	cpu0 := cpuTime(d.PID())

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	if addr := os.Getenv(pprofEnv); addr != "" {
		wg.Go(func() { d.cpuProfile(t, addr, a) })
	}
	wg.Go(func() { a.Run(ctx) })
	var lat []time.Duration
	wg.Go(func() { lat, f.ProbeErrors = b.probe(ctx) })
	var hmu sync.Mutex
	wg.Go(func() {
		tick := time.NewTicker(healthEvery)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			// A health check that ends with the attack is not a failure.
			hctx := context.WithoutCancel(ctx)
			for _, check := range []func(context.Context) error{d.Healthz, d.GRPCHealth} {
				if err := check(hctx); err != nil {
					hmu.Lock()
					f.HealthFailures = append(f.HealthFailures, err)
					hmu.Unlock()
				}
			}
		}
	})
	// Sample VmRSS too (the peak without clear_refs, and a check on it).
	var peak int64
	deadline := time.Now().Add(a.Duration)
	for time.Now().Before(deadline) {
		if n, err := procKB(d.PID(), "VmRSS"); err == nil {
			peak = max(peak, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if hwm {
		peak = max(peak, d.PeakKB(t))
	}
	f.PeakKB = peak
	f.CPU = cpuTime(d.PID()) - cpu0
	cancel()
	wg.Wait()
	f.Probes = len(lat) + len(f.ProbeErrors)
	f.AttackP99 = p99(lat)
	f.BaseP99 = max(f.BaseP99, baseline())

	t.Logf("FIGURES %s: rss %d MB -> peak %d MB (+%d MB); cyclesd CPU %v in %v (%v beyond the probe's); probe tenant p99 %v at rest, %v under attack (%d reserves, %d errors); %d health failures; load average %s",
		a.Name, f.RSSBeforeKB>>10, f.PeakKB>>10, f.GrowthKB()>>10, f.CPU, a.Duration, f.AttackCPU(), f.BaseP99.Round(10*time.Microsecond), f.AttackP99.Round(10*time.Microsecond),
		f.Probes, len(f.ProbeErrors), len(f.HealthFailures), loadAverage())
	if f.GrowthKB() >= MaxRSSGrowthKB {
		hard = append(hard, fmt.Sprintf("peak RSS grew by %d MB (limit %d MB)", f.GrowthKB()>>10, MaxRSSGrowthKB>>10))
	}
	if len(f.ProbeErrors) > 0 {
		hard = append(hard, fmt.Sprintf("%d of the other tenant's reserves failed, first: %v", len(f.ProbeErrors), f.ProbeErrors[0]))
	}
	if len(lat) == 0 {
		latency = append(latency, "the other tenant made no reserve during the attack")
	} else if limit := 2*f.BaseP99 + P99Slack; f.AttackP99 > limit {
		latency = append(latency, fmt.Sprintf("the other tenant's reserve p99 is %v under attack, over 2 x %v + %v", f.AttackP99, f.BaseP99, P99Slack))
	}
	if len(f.HealthFailures) > 0 {
		latency = append(latency, fmt.Sprintf("%d health checks failed, first: %v", len(f.HealthFailures), f.HealthFailures[0]))
	}
	return f, hard, latency
}

// loadAverage is the machine's 1-minute load average (the latency bounds
// depend on it; "?" where /proc has none).
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}

// pprofEnv names the address of a /debug/pprof endpoint served by the binary
// under test (for example CYCLES_ABUSE_BINARY running `cycles-bench serve
// -pprof-addr ...`): each attack then writes a CPU profile of cyclesd during
// the attack to $TMPDIR/<attack>-<n>.cpu.pprof, named in the log.
const pprofEnv = "CYCLES_ABUSE_PPROF"

// cpuProfile fetches a CPU profile for the attack's duration.
func (d *Daemon) cpuProfile(t *testing.T, addr string, a Attack) {
	secs := max(1, int(a.Duration/time.Second))
	res, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, secs))
	if err != nil {
		t.Logf("cpu profile: %v", err)
		return
	}
	defer res.Body.Close()
	f, err := os.CreateTemp(os.Getenv("CYCLES_ABUSE_PPROF_DIR"), strings.NewReplacer(" ", "-", ",", "", "/", "-").Replace(a.Name)+"-*.cpu.pprof")
	if err != nil {
		t.Logf("cpu profile: %v", err)
		return
	}
	defer f.Close()
	if _, err := io.Copy(f, res.Body); err != nil {
		t.Logf("cpu profile: %v", err)
		return
	}
	t.Logf("cpu profile of cyclesd during %s: %s", a.Name, f.Name())
}
