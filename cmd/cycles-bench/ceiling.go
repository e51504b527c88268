package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/cyclesgo/cycles-go/bench"
	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/ledger"
	"github.com/cyclesgo/cycles-go/internal/script"
	"github.com/cyclesgo/cycles-go/internal/store/redisinfo"
)

const ceilingScript = "ledger/reserve"

// ceilingCaller runs the ledger's reserve script straight through
// internal/script with the typed KEYS and ARGV internal/ledger builds for a
// live reserve of the shared shape (ledger.ReserveCall: the same derivation,
// JSON arguments and event context), so the only difference from the
// service is everything in front of Redis: gRPC, auth, validation, hashing,
// decoding. The calls are prepared once per (ttl, grace) the tool uses (the
// live reserve, the backlog's); only the reservation id and idempotency key
// change per call.
type ceilingCaller struct {
	exec  *script.Executor
	calls map[[2]int]*ledger.ReserveCall // read-only once built
}

func newCeilingCaller(ctx context.Context, exec *script.Executor, tenant string) (*ceilingCaller, error) {
	led := ledger.New(exec, ledger.Options{})
	// The event context of an API-key caller, as the service builds it.
	lctx := auth.WithPrincipal(ctx, auth.Principal{Tenant: tenant, KeyID: "0000000000000001"})
	c := &ceilingCaller{exec: exec, calls: map[[2]int]*ledger.ReserveCall{}}
	for _, tg := range [][2]int{{ttlMs, 5000}, {backlogTTL, 0}} {
		rc, err := led.NewReserveCall(lctx, tenant, &cyclesv1.CreateReservationRequest{
			IdempotencyKey: "ceiling", Subject: &cyclesv1.Subject{Tenant: tenant, Workspace: "bench", Agent: "shared"},
			Action:   &cyclesv1.Action{Kind: "llm.completion", Name: "bench-model"},
			Estimate: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: estimate},
			TtlMs:    ptr(int64(tg[0])), GracePeriodMs: ptr(int64(tg[1])),
		})
		if err != nil {
			return nil, err
		}
		c.calls[tg] = rc
	}
	return c, nil
}

// reserve runs one live reserve of worker w, sequence n.
func (c *ceilingCaller) reserve(ctx context.Context, w int, n int64) error {
	return c.reserveTTL(ctx, "ceil-"+strconv.Itoa(w)+"-"+strconv.FormatInt(n, 10), ttlMs, 5000)
}

// reserveTTL runs one live reserve with reservation id (and idempotency key)
// id, ttl and grace.
func (c *ceilingCaller) reserveTTL(ctx context.Context, id string, ttl, grace int) error {
	rc := c.calls[[2]int{ttl, grace}]
	if rc == nil {
		return fmt.Errorf("ceiling: no prepared reserve with ttl %d ms, grace %d ms", ttl, grace)
	}
	return rc.Run(ctx, c.exec, id)
}

// redisMajor is the major version of the Redis at c (0 if unknown).
func redisMajor(ctx context.Context, c *redis.Client) int {
	info, _ := c.Info(ctx, "server").Result()
	v, _, _ := strings.Cut(redisinfo.Field(info, "redis_version"), ".")
	n, _ := strconv.Atoi(strings.TrimSpace(v))
	return n
}

// runCeiling measures the raw script (FCALL or EVALSHA) throughput of the reserve script with
// conns connections, plus one connection's latency, and checks the ledger
// totals the script left.
func (b *runner) runCeiling(ctx context.Context) (*bench.Ceiling, bench.LedgerCheck, error) {
	tenant := fmt.Sprintf("bench-%s-ceiling", b.runID)
	if _, err := b.provisionTenant(ctx, tenant); err != nil {
		return nil, bench.LedgerCheck{}, err
	}
	g := &group{shape: "shared", tenant: tenant}
	paths := g.budgetPaths(0)
	if err := b.createBudgets(ctx, tenant, paths); err != nil {
		return nil, bench.LedgerCheck{}, err
	}
	conns := b.cfg.ceilingConns
	client := redis.NewClient(&redis.Options{Addr: b.cfg.redisAddr, PoolSize: conns, MinIdleConns: conns})
	defer client.Close()
	// The ceiling's executor runs like cyclesd's (same pipelining default)
	// unless -ceiling-inflight says otherwise.
	var opts []script.Option
	if b.cfg.ceilingInFlight != 0 {
		opts = append(opts, script.WithMaxInFlight(b.cfg.ceilingInFlight))
	}
	if redisMajor(ctx, client) >= 7 {
		opts = append(opts, script.WithFunctions()) // as cyclesd on Redis 7
	}
	exec, err := script.New(client, opts...)
	if err != nil {
		return nil, bench.LedgerCheck{}, err
	}
	if err := exec.Load(ctx); err != nil {
		return nil, bench.LedgerCheck{}, err
	}
	cc, err := newCeilingCaller(ctx, exec, tenant)
	if err != nil {
		return nil, bench.LedgerCheck{}, err
	}
	seq := make([]int64, conns+1)
	var okCount int64
	counts := make([]int64, conns+1)
	op := func(ctx context.Context, w int) (string, error) {
		seq[w]++
		cctx, cancel := context.WithTimeout(ctx, callLimit)
		defer cancel()
		err := cc.reserve(cctx, w, seq[w])
		if err == nil {
			counts[w]++
		}
		return "", err
	}
	// Warm the pool so dialing is not measured.
	if err := client.Ping(ctx).Err(); err != nil {
		return nil, bench.LedgerCheck{}, err
	}
	pp := b.pids
	pp.server = 0 // cyclesd is idle here
	res := runPhase(ctx, conns, b.cfg.warmup, b.cfg.duration, pp, op)
	out := &bench.Ceiling{Script: ceilingScript, Conns: conns, Window: res.measured()}
	// One connection: the latency floor of the script itself.
	single := runPhase(ctx, 1, b.cfg.warmup/2, b.cfg.duration/2, pids{}, func(ctx context.Context, _ int) (string, error) {
		return op(ctx, conns)
	})
	l := latency(single.samples)
	out.Single = &l

	for _, n := range counts {
		okCount += n
	}
	chk := bench.LedgerCheck{Group: tenant}
	for _, p := range paths {
		chk.Budgets++
		got, err := b.getBudget(ctx, tenant, p)
		if err != nil {
			chk.Mismatches++
			chk.Details = append(chk.Details, fmt.Sprintf("%s: %v", p, err))
			continue
		}
		if got.GetReserved() != okCount*estimate || got.GetRemaining() != b.cfg.allocated-okCount*estimate {
			chk.Mismatches++
			chk.Details = append(chk.Details, fmt.Sprintf("%s: redis reserved=%d remaining=%d; %d successful script calls imply reserved=%d",
				p, got.GetReserved(), got.GetRemaining(), okCount, okCount*estimate))
		}
	}
	return out, chk, nil
}
