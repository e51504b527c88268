package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/admin"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/ledger"
	"github.com/cyclesgo/cycles-go/internal/policy"
	"github.com/cyclesgo/cycles-go/internal/script"
)

// scriptcost measures what one script call costs inside Redis, as a figure
// that does not depend on what else the machine is doing: redis-server runs
// under callgrind, and the instructions it executes between two counter
// resets, divided by the calls, are the cost per call. Calls go through the
// domain packages (internal/ledger) exactly as cyclesd sends them, one at a time,
// so the figure moves only when the scripts, their arguments or the
// executor change. Without valgrind (-valgrind=false) it reports Redis's own
// microseconds per call (INFO commandstats) instead, which is noisy on a
// shared machine; -interleave measures that time call by call with the
// cells called in turn, which cancels the machine's drift
// (scriptcost_interleave.go). BENCHMARKS.md, "Script cost".
func scriptcostMain(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("scriptcost", flag.ContinueOnError)
	n := fs.Int("n", 400, "calls per measured operation")
	useValgrind := fs.Bool("valgrind", true, "run redis-server under callgrind and count instructions")
	ops := fs.String("ops", "reserve,commit,release,physical", "operations to measure (also: reserve-pol10, a reserve on a tenant with 10 scope policies, 5 matching with caps; reserve-pol10-read, the same without caps; reserve-pol10-read-spread, that for a new agent every call; reserve-gov5, a reserve on a tenant with an allowlist and 5 action/risk-class quotas that all govern it; reserve-spread and reserve-gov5-spread, reserve and reserve-gov5 for a new agent every call, so nothing kept per scope path between calls is reused; reserve-rl, a reserve on a tenant whose one policy sets a reservation rate limit it stays under; reserve-twin, reserve on a second tenant set up the same way)")
	functions := fs.Bool("functions", true, "call the scripts as Redis 7 Functions (FUNCTION LOAD, FCALL), as cyclesd does on Redis 7; false: EVALSHA, as on Redis 6 and the embedded store")
	scriptOnly := fs.Bool("script-only", true, "count only the instructions inside the script commands (FCALL, EVALSHA), as Redis's commandstats µs/script time them; false: everything redis-server executes while the calls run (reading and answering the command, serverCron, and the slowlog entries valgrind's slowness triggers)")
	keep := fs.String("keep", "", "keep the callgrind dumps (cg.out.N, one per op in order) in this directory for callgrind_annotate")
	interleave := fs.Bool("interleave", false, "wall clock without drift: after -warmup unmeasured rounds, -n rounds that call every op once each, in the order of -ops and reversed every other round, on one redis-server and one connection; Redis's µs per call from SLOWLOG, the client's CPU per call from getrusage; per op mean, median and trimmed mean, per pair the ratios of adjacent calls (implies -valgrind=false)")
	warmup := fs.Int("warmup", 500, "with -interleave: unmeasured rounds first")
	slowerThan := fs.Int("slowlog-slower-than", 10, "with -interleave: slowlog-log-slower-than in µs; above the commands scripts run (Redis 7.0 logs those too, inside the script's time), under every script call (one under it fails the run)")
	block := fs.Int("block", 5, "with -interleave: calls of one op in a row per round; the first of each (after another op's call, whose tenant's scripts' memos it misses) is not kept, so the calls kept see what a run of one op sees; 1: strict alternation, every call kept")
	raw := fs.String("raw", "", "with -interleave: write every measured call (round, op, Redis µs, client CPU µs) to this CSV file")
	pairs := fs.String("pairs", "", "with -interleave: the ops compared, as op/base,op/base (default: every op named with gov5, pol10, pol10-read, rl or twin against the same op without it, when both are in -ops)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *interleave {
		*useValgrind = false
	} else {
		*warmup = 0
	}
	dir, err := os.MkdirTemp("", "cycles-scriptcost-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if *keep != "" {
		if err := os.MkdirAll(*keep, 0o755); err != nil {
			return err
		}
		dir = *keep
	}
	rs, addr, err := startCostRedis(dir, *useValgrind, *scriptOnly)
	if err != nil {
		return err
	}
	defer rs.stop(5 * time.Second)
	client := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second})
	defer client.Close()
	execOpts := []script.Option{script.WithMaxInFlight(-1)}
	if *functions {
		execOpts = append(execOpts, script.WithFunctions())
	}
	exec, err := script.New(client, execOpts...)
	if err != nil {
		return err
	}
	if err := exec.Load(ctx); err != nil {
		return err
	}
	tenant := "cost"
	adm := admin.New(exec, admin.Options{KeyCacheTTL: -1, KeyNegativeCacheTTL: -1})
	l := ledger.New(exec, ledger.Options{})
	lctx := auth.WithPrincipal(ctx, auth.Principal{Tenant: tenant, KeyID: "0000000000000001"})
	act := &cyclesv1.Action{Kind: "llm.completion", Name: "bench-model"}
	seq := 0
	// setup makes a tenant with the three budgets of a reserve; reserveAs
	// reserves on one.
	setup := func(tenant string) error {
		if _, err := adm.CreateTenant(ctx, &cyclesv1.CreateTenantRequest{TenantId: tenant, Name: "cost"}); err != nil {
			return fmt.Errorf("create tenant: %w", err)
		}
		for _, p := range []string{"", "/workspace:bench", "/workspace:bench/agent:shared"} {
			if _, err := adm.CreateBudget(ctx, &cyclesv1.CreateBudgetRequest{TenantId: tenant, ScopePath: "tenant:" + tenant + p,
				Unit: cyclesv1.Unit_UNIT_TOKENS, Allocated: 1_000_000_000_000}); err != nil {
				return fmt.Errorf("create budget %s: %w", p, err)
			}
		}
		return nil
	}
	// agent is the reserve's agent: "shared" (budgeted) for every call, or,
	// for the -spread cells, a new one per call (no budget of its own, so
	// the tenant and workspace budgets are charged): nothing the scripts
	// keep per scope path between calls is ever reused.
	agent := func(spread bool) string {
		if spread {
			return "s" + strconv.Itoa(seq)
		}
		return "shared"
	}
	reserveOn := func(tenant string, spread bool) (string, error) {
		seq++
		r, err := l.Reserve(lctx, tenant, &cyclesv1.CreateReservationRequest{
			IdempotencyKey: "k" + strconv.Itoa(seq), Subject: &cyclesv1.Subject{Tenant: tenant, Workspace: "bench", Agent: agent(spread)},
			Action: act, Estimate: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: estimate}, TtlMs: ptr(int64(ttlMs)),
		})
		if err != nil {
			return "", err
		}
		return r.GetReservationId(), nil
	}
	reserveAs := func(tenant string) (string, error) { return reserveOn(tenant, false) }
	if err := setup(tenant); err != nil {
		return err
	}
	reserve := func() (string, error) { return reserveAs(tenant) }
	// policyTenant sets up a tenant of its own with 10 ACTIVE policies
	// (benchPolicies), 5 of them matching the reserve's scope.
	policyTenant := func(name string, caps, spread bool) error {
		if err := setup(name); err != nil {
			return err
		}
		return benchPolicies(ctx, policy.New(exec, policy.Options{}), name, 10, caps, spread)
	}
	meter := &costMeter{pid: rs.pid(), valgrind: *useValgrind, client: client, dir: dir}
	how := "EVALSHA"
	if *functions {
		how = "FCALL"
	}
	govReady, rlReady := false, false
	// cell sets up what op needs (a tenant, policies, prepared
	// reservations) and returns its one call; the i-th call of a cell gets i.
	cell := func(op string) (func(i int) error, error) {
		var prepared []string
		var call func(i int) error
		sc := redis.NewScript(physicalScript)
		switch op {
		case "reserve":
			call = func(int) error { _, err := reserve(); return err }
		case "reserve-spread":
			call = func(int) error { _, err := reserveOn(tenant, true); return err }
		case "reserve-twin":
			// reserve on a second tenant set up as the first: the control
			// of -interleave, whose pair with reserve must come out even.
			if err := setup("costtwin"); err != nil {
				return nil, err
			}
			call = func(int) error { _, err := reserveAs("costtwin"); return err }
		case "reserve-pol10":
			// A tenant of its own with 10 ACTIVE policies: 5 match the
			// reserve's scope (caps, TTL, overage), 5 name other workspaces.
			if err := policyTenant("costpol", true, false); err != nil {
				return nil, err
			}
			call = func(int) error { _, err := reserveAs("costpol"); return err }
		case "reserve-pol10-read":
			// The same 10 policies without caps: the reserve's answer and
			// record are those of a plain reserve, so the difference is what
			// reading and matching the policies costs.
			if err := policyTenant("costpolr", false, false); err != nil {
				return nil, err
			}
			call = func(int) error { _, err := reserveAs("costpolr"); return err }
		case "reserve-pol10-read-spread":
			// reserve-pol10-read for a new agent every call (compare with
			// reserve-spread): 10 policies, 5 matching, on a scope path no
			// earlier call used, so nothing kept per scope path is reused.
			// The agent-specific pattern names every agent of the workspace,
			// so 5 still match. The tenant is fresh, so 200 unmeasured
			// reserves of its shared agent first take its reservation index
			// and records past Redis's small encodings (listpacks, whose
			// inserts cost O(n)), as the other cells' tenants are by then:
			// the difference is then the policies'.
			if err := policyTenant("costpols", false, true); err != nil {
				return nil, err
			}
			for i := 0; i < 200; i++ {
				if _, err := reserveOn("costpols", false); err != nil {
					return nil, err
				}
			}
			call = func(int) error { _, err := reserveOn("costpols", true); return err }
		case "reserve-rl":
			// A tenant of its own whose one policy (*) carries
			// rate_limits.max_reservations_per_minute, too high to refuse:
			// every reserve reads and counts its minute counter.
			// Named twice in -ops (to interleave with reserve), it is set up once.
			if !rlReady {
				if err := setup("costrl"); err != nil {
					return nil, err
				}
				if _, err := policy.New(exec, policy.Options{}).CreateScopePolicy(ctx, &cyclesv1.CreateScopePolicyRequest{TenantId: "costrl",
					Name: "bench-rl", ScopePattern: "*", RateLimits: &cyclesv1.PolicyRateLimits{MaxReservationsPerMinute: ptr(int32(math.MaxInt32))}}); err != nil {
					return nil, fmt.Errorf("create rate-limit policy: %w", err)
				}
				rlReady = true
			}
			call = func(int) error { _, err := reserveAs("costrl"); return err }
		case "reserve-gov5", "reserve-gov5-spread":
			// v0.1.26 governance on a tenant of its own: an allowlist and 5
			// quotas that all govern the reserve (checked and counted).
			// Named twice in -ops (to interleave with reserve), it is set up once.
			// The -spread twin reserves for a new agent every call, so its
			// quota plans and policy matches are never the ones kept from an
			// earlier call (compare with reserve-spread).
			if !govReady {
				if err := setup("costgov"); err != nil {
					return nil, err
				}
				if err := benchGovernance(ctx, policy.New(exec, policy.Options{}), "costgov"); err != nil {
					return nil, err
				}
				govReady = true
			}
			spread := op == "reserve-gov5-spread"
			call = func(int) error { _, err := reserveOn("costgov", spread); return err }
		case "commit", "release":
			for i := 0; i < (*n+*warmup)*max(1, *block); i++ {
				id, err := reserve()
				if err != nil {
					return nil, err
				}
				prepared = append(prepared, id)
			}
			call = func(i int) error {
				if op == "commit" {
					_, err := l.Commit(lctx, tenant, &cyclesv1.CommitReservationRequest{ReservationId: prepared[i],
						IdempotencyKey: "c", Actual: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 700}})
					return err
				}
				_, err := l.Release(lctx, tenant, &cyclesv1.ReleaseReservationRequest{ReservationId: prepared[i], IdempotencyKey: "r"})
				return err
			}
		case "physical":
			for i := 1; i <= 3; i++ {
				if err := client.HSet(ctx, fmt.Sprintf("{p}:b%d", i), "remaining", 1_000_000_000_000, "reserved", 0).Err(); err != nil {
					return nil, err
				}
			}
			call = func(i int) error {
				id := "p" + strconv.Itoa(i)
				return sc.Run(ctx, client, []string{"{p}:i:" + id, "{p}:b1", "{p}:b2", "{p}:b3", "{p}:r:" + id, "{p}:idx"},
					id, estimate).Err()
			}
		default:
			return nil, fmt.Errorf("unknown op %q", op)
		}
		if op == "physical" { // load the script outside the measured calls
			if err := sc.Load(ctx, client).Err(); err != nil {
				return nil, err
			}
		}
		return call, nil
	}
	opList := strings.Split(*ops, ",")
	if *interleave {
		return interleaveCells(ctx, client, how, opList, cell, interleaveOptions{rounds: *n, warmup: *warmup, pairs: *pairs, slowerThan: *slowerThan, raw: *raw, block: *block}, os.Stdout)
	}
	fmt.Printf("scriptcost: %d calls per op by %s, redis-server %s (%s)\n", *n, how, addr, meter.unit())
	for _, op := range opList {
		call, err := cell(op)
		if err != nil {
			return err
		}
		cpu0, heap0 := processCPU(), processAllocs()
		per, err := meter.measure(ctx, *n, call)
		if err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		cpu := float64((processCPU() - cpu0).Microseconds()) / float64(*n)
		heap := processAllocs().per(heap0, *n)
		fmt.Printf("  %-18s %12.0f %s per call  %7.1f µs client CPU per call  %6.1f allocs %7.0f B per call\n",
			op, per, meter.unit(), cpu, heap.objects, heap.bytes)
	}
	return nil
}

// startCostRedis starts a private redis-server, under callgrind when asked;
// with scriptOnly callgrind counts only inside the script commands. Without
// it a count also holds work that depends on the wall clock, not on the
// script: serverCron's ticks and, under valgrind's slowdown, a slowlog entry
// for every call past the 10 ms threshold (a longer script crosses it more
// often, so the gap between two cells widened by several thousand
// instructions).
func startCostRedis(dir string, underValgrind, scriptOnly bool) (*proc, string, error) {
	if !underValgrind {
		return startRedis(dir)
	}
	vg, err := exec.LookPath("valgrind")
	if err != nil {
		return nil, "", fmt.Errorf("valgrind not found (apt install valgrind, or -valgrind=false): %w", err)
	}
	vargs := []string{"--tool=callgrind", "--callgrind-out-file=" + filepath.Join(dir, "cg.out")}
	if scriptOnly {
		vargs = append(vargs, "--toggle-collect=fcallCommand", "--toggle-collect=evalShaCommand", "--toggle-collect=evalCommand")
	}
	return startRedisUnder(dir, vg, vargs, 60*time.Second)
}

type costMeter struct {
	pid      int
	valgrind bool
	client   *redis.Client
	dir      string
	dumps    int
}

func (m *costMeter) unit() string {
	if m.valgrind {
		return "instructions"
	}
	return "µs in Redis"
}

// measure runs call n times between two readings of the counter.
func (m *costMeter) measure(ctx context.Context, n int, call func(i int) error) (float64, error) {
	if m.valgrind {
		if err := exec.Command("callgrind_control", "--zero", strconv.Itoa(m.pid)).Run(); err != nil {
			return 0, fmt.Errorf("callgrind_control --zero: %w", err)
		}
	}
	calls0, usec0 := scriptStats(m.client)
	for i := 0; i < n; i++ {
		if err := call(i); err != nil {
			return 0, err
		}
	}
	if !m.valgrind {
		calls1, usec1 := scriptStats(m.client)
		if calls1 == calls0 {
			return 0, errors.New("no script calls seen")
		}
		return float64(usec1-usec0) / float64(calls1-calls0), nil
	}
	if err := exec.Command("callgrind_control", "--dump", strconv.Itoa(m.pid)).Run(); err != nil {
		return 0, fmt.Errorf("callgrind_control --dump: %w", err)
	}
	m.dumps++
	ir, err := callgrindTotal(filepath.Join(m.dir, fmt.Sprintf("cg.out.%d", m.dumps)))
	if err != nil {
		return 0, err
	}
	return float64(ir) / float64(n), nil
}

// callgrindTotal reads the instruction total ("summary:" or "totals:") of
// one callgrind dump.
func callgrindTotal(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		for _, p := range []string{"summary:", "totals:"} {
			if rest, ok := strings.CutPrefix(line, p); ok {
				return strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s: no instruction total", path)
}

// benchPolicies gives tenant n ACTIVE scope policies, half of them matching
// the bench reserve's scope (tenant/workspace:bench/agent:shared; with spread,
// the first names every agent of workspace:bench instead of agent:shared, so
// that 5 match a new agent's scope too).
func benchPolicies(ctx context.Context, svc *policy.Service, tenant string, n int, caps, spread bool) error {
	for i := 0; i < n; i++ {
		req := &cyclesv1.CreateScopePolicyRequest{TenantId: tenant, Name: "bench-" + strconv.Itoa(i), Priority: int32(i),
			ScopePattern: "tenant:" + tenant + "/workspace:other" + strconv.Itoa(i) + "/*"}
		if i%2 == 0 {
			req.ScopePattern = []string{"agent:shared", "tenant:" + tenant + "/*", "*/agent:*", "workspace:bench/*", "*"}[i/2%5]
			if spread && i == 0 {
				req.ScopePattern = "workspace:bench/agent:*"
			}
			if caps {
				req.Caps = &cyclesv1.Caps{MaxTokens: ptr(int64(1000 + i))}
			}
			req.ReservationTtlOverride = &cyclesv1.ReservationTtlOverride{MaxTtlMs: ptr(int64(3_600_000))}
		}
		if _, err := svc.CreateScopePolicy(ctx, req); err != nil {
			return fmt.Errorf("create policy %d: %w", i, err)
		}
	}
	return nil
}
