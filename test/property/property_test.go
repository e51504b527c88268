// Package property checks the budget ledger with random budget trees and
// random concurrent operation sequences (pgregory.net/rapid), driving
// internal/ledger and internal/sweeper against a real Redis. See README.md.
package property

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/big"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"pgregory.net/rapid"

	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/ledger"
	"github.com/cyclesgo/cycles-go/internal/sweeper"
	"github.com/cyclesgo/cycles-go/internal/telemetry/telemetrytest"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
	"github.com/cyclesgo/cycles-go/test/redistest"
	"github.com/cyclesgo/cycles-go/test/scripttest"
)

// Case counts: rapid's -rapid.checks flag (or RAPID_CHECKS) sets the number
// of cases; when neither is given, `go test` runs defaultChecks (shortChecks
// with -short), which keeps the package well under a minute on 2 cores.
// `make test-long` runs -rapid.checks=1000.
const (
	defaultChecks = 100
	shortChecks   = 20
)

func TestMain(m *testing.M) {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "rapid.checks" })
	if _, env := os.LookupEnv("RAPID_CHECKS"); !explicit && !env {
		n := defaultChecks
		if testing.Short() {
			n = shortChecks
		}
		_ = flag.Set("rapid.checks", strconv.Itoa(n))
	}
	redistest.Main(m, redistest.MainOptions{LeakCheck: true})
}

// env is what every case shares: one Redis, one ledger, one sweeper.
type env struct {
	// stats counts outcomes by operation and code over all cases, to show
	// what a run exercised.
	stats   map[string]int
	client  redis.UniversalClient
	ledger  *ledger.Ledger
	sweeper *sweeper.Sweeper
	metrics *telemetrytest.Reader
}

func newEnv(t *testing.T) *env {
	client := redistest.SharedClient(t)
	exec := scripttest.On(t, client)
	mr := telemetrytest.New()
	return &env{
		stats:   map[string]int{},
		client:  client,
		ledger:  ledger.New(exec, ledger.Options{MeterProvider: mr.Provider}),
		sweeper: sweeper.New(exec, sweeper.Options{MeterProvider: mr.Provider, Workers: 2}),
		metrics: mr,
	}
}

// caseRun is one generated case.
type caseRun struct {
	t        *rapid.T
	tt       *testing.T
	env      *env
	w        *world
	m        *model
	batch    int
	seq      int
	problems []string
	history  []string
}

func (c *caseRun) failf(format string, args ...any) {
	c.problems = append(c.problems, fmt.Sprintf(format, args...))
}

// fatalIfProblems ends the case with everything that went wrong, the world
// and the operations so far (rapid then shrinks the case).
func (c *caseRun) fatalIfProblems(when string) {
	if len(c.problems) == 0 {
		return
	}
	c.t.Fatalf("%s:\n  %s\n%s\noperations:\n  %s", when, strings.Join(c.problems, "\n  "), c.w, strings.Join(c.history, "\n  "))
}

// counters read at the start of a case (the reader is cumulative).
type counterSnapshot map[string]int64

var countersChecked = []struct {
	name  string
	attrs []attribute.KeyValue
}{
	{"cycles.reservations.created", nil},
	{"cycles.reservations.committed", nil},
	{"cycles.reservations.released", []attribute.KeyValue{attribute.String("reason", "client")}},
	{"cycles.reservations.extended", nil},
	{"cycles.events.created", nil},
	{"cycles.sweeper.outcomes", []attribute.KeyValue{attribute.String("outcome", sweeper.OutcomeExpired)}},
}

func (e *env) counters(t *testing.T) counterSnapshot {
	s := counterSnapshot{}
	for _, c := range countersChecked {
		s[c.name] = e.metrics.Sum(t, c.name, c.attrs...)
	}
	return s
}

// TestLedgerProperties: for random budget trees (depth 1-6, one or two
// units, random allocations and overdraft limits, random tenant default
// policy and extension cap) and random sequences of concurrent batches of
// reserve / commit (below, at and above the estimate) / release / extend /
// createEvent / dry run and decide / sweep, with retries of earlier requests
// and at most one wait past short TTLs followed by a sweep:
//
//   - after every batch: ledgertest.Violations (the ledger equation,
//     reserved >= 0, every ACTIVE reservation indexed at expires_at + grace
//     and every index entry an ACTIVE record, reserved = sum of ACTIVE
//     estimates); at every budget spent + debt = exactly the sum
//     charged to the commits and events under it; debt <= overdraft_limit;
//     remaining >= 0 on every budget no ALLOW_WITH_OVERDRAFT charge can reach
//     (so REJECT-only trees are never oversubscribed);
//   - per operation: the refusal codes the protocol allows in that state,
//     the budgets held equal the tree's, commits and events charge within
//     their policy's bounds, a retry of a key that succeeded replays;
//   - after the wait: the sweep expired everything past its deadline;
//   - at the end: one record per reservation and per event; no reservation
//     in two terminal states; each idempotency key maps to exactly one
//     effect (one reservation, one event, one commit, one extension); expiry
//     events exactly once per EXPIRED record; terminal records carry their
//     retention TTL; the counters moved by exactly what happened.
func TestLedgerProperties(t *testing.T) {
	e := newEnv(t)
	var cases, ops, waits int
	rapid.Check(t, func(rt *rapid.T) {
		cases++
		tenant := ledgertest.NewTenantID(t)
		defer e.dropTenant(t, tenant)
		before := e.counters(t)
		c := &caseRun{t: rt, tt: t, env: e, m: newModel()}
		c.w = drawWorld(rt, tenant)
		e.seed(t, c.w)
		ctx := context.Background()

		// Uniform (not rapid's small-favouring integers): long sequences and
		// wide batches are the point; shrinking still shortens them.
		steps := 1 + pick(rt, 24, "steps")
		waitAt := -1
		if chance(rt, 30, "has_wait") {
			// In the second half, so there is usually something to expire.
			waitAt = steps/2 + pick(rt, steps-steps/2, "wait_at")
		}
		for step := 0; step < steps; step++ {
			if step == waitAt {
				if c.waitAndSweep(ctx) {
					waits++
				}
			}
			n := 1 + pick(rt, 4, "batch")
			batch := make([]*op, n)
			for i := range batch {
				batch[i] = c.drawOp(rt)
				c.history = append(c.history, fmt.Sprintf("batch %d: %s", c.batch+1, batch[i]))
			}
			ops += n
			c.runBatch(ctx, batch)
			c.fatalIfProblems(fmt.Sprintf("batch %d", c.batch))
			c.checkLedger(ctx)
			c.fatalIfProblems(fmt.Sprintf("ledger after batch %d", c.batch))
		}
		c.checkFinal(ctx, before)
		c.fatalIfProblems("final state")
	})
	t.Logf("%d cases, %d operations, %d waits past expiry; outcomes:", cases, ops, waits)
	for _, k := range sortedKeys(e.stats) {
		t.Logf("  %-40s %6d", k, e.stats[k])
	}
}

// seed writes the case's tenant record and budgets.
func (e *env) seed(t *testing.T, w *world) {
	tn := ledgertest.Tenant{DefaultPolicy: w.defaultPolicy, MaxExtensions: w.maxExt}
	ledgertest.SeedTenant(t, e.client, w.tenant, tn)
	for _, id := range sortedKeys(w.budgets) {
		b := w.budgets[id]
		ledgertest.SeedBudget(t, e.client, w.tenant, ledgertest.Budget{
			Scope: b.Scope, Unit: b.Unit, Allocated: b.Allocated, OverdraftLimit: b.Limit,
			// The budget-level policy is ignored by the ledger
			// (docs/protocol.md#overage-policies-and-debt); vary it to prove that.
			Extra: map[string]string{"commit_overage_policy": policies[1+len(id)%3]},
		})
	}
}

// dropTenant deletes a finished case's keys and unregisters it, so sweeps of
// later cases walk one tenant and SCANs stay small.
func (e *env) dropTenant(t *testing.T, tenant string) {
	ctx := context.Background()
	ks, err := scanKeys(ctx, e.client, tenant)
	if err == nil {
		for _, k := range ks {
			e.client.Del(ctx, k)
		}
	}
	if err := e.client.ZRem(ctx, keys.Tenants, tenant).Err(); err != nil {
		t.Logf("unregister %s: %v", tenant, err)
	}
}

// scanKeys lists every key of tenant (every master on Cluster).
func scanKeys(ctx context.Context, c redis.UniversalClient, tenant string) ([]string, error) {
	pattern := strings.NewReplacer("{", `\{`, "}", `\}`).Replace(keys.Tenant(tenant).Prefix()) + "*"
	var mu sync.Mutex
	var out []string
	scan := func(ctx context.Context, cl redis.Cmdable) error {
		it := cl.Scan(ctx, 0, pattern, 1000).Iterator()
		for it.Next(ctx) {
			mu.Lock()
			out = append(out, it.Val())
			mu.Unlock()
		}
		return it.Err()
	}
	if cc, ok := c.(*redis.ClusterClient); ok {
		return out, cc.ForEachMaster(ctx, func(ctx context.Context, cl *redis.Client) error { return scan(ctx, cl) })
	}
	return out, scan(ctx, c)
}

// waitAndSweep sleeps until every ACTIVE short-TTL reservation (grace <=
// 300 ms) is past its deadline, sweeps, and checks that nothing past its
// deadline is left in the index. It is the case's one sleep.
func (c *caseRun) waitAndSweep(ctx context.Context) bool {
	now := time.Now().UnixMilli()
	var target int64
	for _, r := range c.m.resvs {
		if r.commitKey != "" || r.releaseKey != "" || r.graceMs > 300 {
			continue
		}
		exp := r.expiresAt
		for _, x := range r.extends {
			if x.expiresAt > exp {
				exp = x.expiresAt
			}
		}
		if d := exp + r.graceMs; d <= now+1500 && d > target {
			target = d
		}
	}
	if target == 0 {
		c.env.stats["wait skipped: no short-TTL reservation active"]++
		return false
	}
	if d := time.Until(time.UnixMilli(target + 25)); d > 0 {
		time.Sleep(d)
	}
	c.history = append(c.history, fmt.Sprintf("wait until %d, then sweep", target+25))
	sweepStart := time.Now().UnixMilli()
	c.runBatch(ctx, []*op{{kind: opSweep}})
	c.fatalIfProblems("sweep after the wait")
	left, err := c.env.client.ZRangeByScoreWithScores(ctx, keys.Tenant(c.w.tenant).Deadlines(),
		&redis.ZRangeBy{Min: "-inf", Max: strconv.FormatInt(sweepStart-2, 10)}).Result()
	if err != nil {
		c.t.Fatalf("read deadline index: %v", err)
	}
	for _, z := range left {
		c.failf("reservation %v (deadline %.0f) survived a sweep that started at %d", z.Member, z.Score, sweepStart)
	}
	c.checkLedger(ctx)
	c.fatalIfProblems("ledger after the wait and sweep")
	return true
}

// budgetState is one budget hash, exact.
type budgetState struct {
	allocated, remaining, reserved, spent, debt, limit *big.Int
}

func (c *caseRun) readBudget(ctx context.Context, b budgetSpec) (budgetState, bool) {
	m, err := c.env.client.HGetAll(ctx, keys.Tenant(c.w.tenant).Budget(b.Scope, b.Unit)).Result()
	if err != nil {
		c.t.Fatalf("read budget %s: %v", b.id(), err)
	}
	if _, err := keys.ParseBalance(m[keys.BalanceField]); err != nil {
		c.failf("budget %s: %v", b.id(), err)
	}
	m = ledgertest.BalanceFields(m)
	if len(m) == 0 {
		c.failf("budget %s vanished", b.id())
		return budgetState{}, false
	}
	get := func(f string) *big.Int {
		v, ok := new(big.Int).SetString(m[f], 10)
		if !ok {
			c.failf("budget %s field %s = %q", b.id(), f, m[f])
			return new(big.Int)
		}
		return v
	}
	return budgetState{get("allocated"), get("remaining"), get("reserved"), get("spent"), get("debt"), get("overdraft_limit")}, true
}

// checkLedger runs the invariants that hold at every quiescent point.
func (c *caseRun) checkLedger(ctx context.Context) {
	for _, v := range ledgertest.Violations(ctx, c.env.client, c.w.tenant) {
		c.failf("ledger invariant: %s", v)
	}
	for _, id := range sortedKeys(c.w.budgets) {
		spec := c.w.budgets[id]
		s, ok := c.readBudget(ctx, spec)
		if !ok {
			continue
		}
		if s.allocated.Cmp(big.NewInt(spec.Allocated)) != 0 || s.limit.Cmp(big.NewInt(spec.Limit)) != 0 {
			c.failf("%s: allocated %s / overdraft_limit %s changed (seeded %d / %d)", id, s.allocated, s.limit, spec.Allocated, spec.Limit)
		}
		if s.debt.Cmp(s.limit) > 0 {
			c.failf("%s: debt %s above overdraft_limit %s", id, s.debt, s.limit)
		}
		if c.w.rejectOnly && (s.remaining.Sign() < 0 || s.debt.Sign() != 0) {
			c.failf("%s: REJECT-only tree oversubscribed: remaining %s debt %s", id, s.remaining, s.debt)
		}
		if s.remaining.Sign() < 0 && (spec.Limit == 0 || !c.m.overdraftUse[id]) {
			c.failf("%s: oversubscribed (remaining %s) though no overdraft charge can reach it (limit %d)", id, s.remaining, spec.Limit)
		}
		want := c.m.charged[id]
		if want == nil {
			want = new(big.Int)
		}
		if got := new(big.Int).Add(s.spent, s.debt); got.Cmp(want) != 0 {
			c.failf("%s: spent + debt = %s, but commits and events under it charged %s", id, got, want)
		}
	}
}

// checkFinal checks the records, the event log, the idempotency records and
// the counters against everything the case observed.
func (c *caseRun) checkFinal(ctx context.Context, before counterSnapshot) {
	cl := c.env.client
	tn := keys.Tenant(c.w.tenant)
	all, err := scanKeys(ctx, cl, c.w.tenant)
	if err != nil {
		c.t.Fatalf("scan: %v", err)
	}
	var records, eventRecords int
	indexKeys := map[string]bool{tn.Deadlines(): true, tn.Created(): true, tn.Expires(): true}
	for _, k := range all {
		switch {
		case strings.HasPrefix(k, tn.Prefix()+"r:") && !indexKeys[k]:
			records++
			if _, ok := c.m.byID[strings.TrimPrefix(k, tn.Prefix()+"r:")]; !ok {
				c.failf("record %s belongs to no reservation the case created", k)
			}
		case strings.HasPrefix(k, tn.Prefix()+"ev:"):
			eventRecords++
			if _, ok := c.m.events[strings.TrimPrefix(k, tn.Prefix()+"ev:")]; !ok {
				c.failf("event record %s belongs to no event the case applied", k)
			}
		}
	}
	if records != len(c.m.resvs) || eventRecords != len(c.m.events) {
		c.failf("%d reservation records for %d reservations, %d event records for %d events", records, len(c.m.resvs), eventRecords, len(c.m.events))
	}

	// reservation.expired events by reservation id.
	expiredEvents := map[string]int{}
	msgs, err := cl.XRange(ctx, tn.Events(), "-", "+").Result()
	if err != nil {
		c.t.Fatalf("read events: %v", err)
	}
	for _, msg := range msgs {
		if msg.Values["type"] != "reservation.expired" {
			continue
		}
		var data struct {
			ReservationID string `json:"reservation_id"`
		}
		if err := json.Unmarshal([]byte(fmt.Sprint(msg.Values["data"])), &data); err != nil {
			c.failf("reservation.expired event %s: %v", msg.ID, err)
		}
		expiredEvents[data.ReservationID]++
	}

	maxExt := 10
	if c.w.maxExt != nil {
		maxExt = *c.w.maxExt
	}
	var committed, released, expired, extended int64
	for _, r := range c.m.resvs {
		rec, err := cl.HGetAll(ctx, tn.Reservation(r.id)).Result()
		if err != nil {
			c.t.Fatalf("read %s: %v", r.id, err)
		}
		state := rec["state"]
		terminalFields := 0
		for _, f := range []string{"commit_key", "release_key", "expired_at"} {
			if rec[f] != "" {
				terminalFields++
			}
		}
		switch {
		case r.commitKey != "":
			committed++
			if state != "COMMITTED" || rec["commit_key"] != r.commitKey || rec["charged"] != strconv.FormatInt(r.charged, 10) {
				c.failf("reservation %s: committed with key %s charging %d, record says %s %s %s", r.id, r.commitKey, r.charged, state, rec["commit_key"], rec["charged"])
			}
		case r.releaseKey != "":
			released++
			if state != "RELEASED" || rec["release_key"] != r.releaseKey {
				c.failf("reservation %s: released with key %s, record says %s %s", r.id, r.releaseKey, state, rec["release_key"])
			}
		case state == "EXPIRED":
			expired++
		case state != "ACTIVE":
			c.failf("reservation %s: never settled, but its state is %q", r.id, state)
		}
		if terminalFields > 1 || (state == "ACTIVE") != (terminalFields == 0) {
			c.failf("reservation %s in state %s carries %d terminal markers: %v", r.id, state, terminalFields, rec)
		}
		if n := expiredEvents[r.id]; (state == "EXPIRED") != (n == 1) || n > 1 {
			c.failf("reservation %s in state %s has %d reservation.expired events", r.id, state, n)
		}
		ttl, err := cl.PTTL(ctx, tn.Reservation(r.id)).Result()
		if err != nil {
			c.t.Fatalf("pttl: %v", err)
		}
		if terminal := state != "ACTIVE"; terminal != (ttl > 0) || ttl > time.Duration(keys.TerminalRetentionMs)*time.Millisecond {
			c.failf("reservation %s in state %s has TTL %v (terminal records keep 30 days, ACTIVE ones none)", r.id, state, ttl)
		}
		// Extensions: one per distinct successful key, each adding its amount.
		wantExp := r.expiresAt
		for _, x := range r.extends {
			wantExp += x.by
		}
		extended += int64(len(r.extends))
		if _, ok := rec["ext_count"]; !ok {
			rec["ext_count"] = "0" // stored once extended (docs/design.md#reservation-records)
		}
		if rec["ext_count"] != strconv.Itoa(len(r.extends)) || rec["expires_at"] != strconv.FormatInt(wantExp, 10) {
			c.failf("reservation %s: %d distinct extensions to %d, record has ext_count %s expires_at %s", r.id, len(r.extends), wantExp, rec["ext_count"], rec["expires_at"])
		}
		if len(r.extends) > maxExt || (r.maxExtRefused && len(r.extends) != maxExt) {
			c.failf("reservation %s: %d extensions (max %d, refused as exceeded: %v)", r.id, len(r.extends), maxExt, r.maxExtRefused)
		}
		// The reserve key's idempotency record names this reservation.
		for k := range r.keys {
			raw, err := cl.Get(ctx, tn.Idempotency("reserve", k)).Result()
			if err != nil || idemRecordID(raw, "r_"+c.w.tenant+"_") != r.id {
				c.failf("idempotency record of reserve key %s = %q (%v), want reservation %s", k, raw, err, r.id)
			}
		}
	}
	for _, e := range c.m.events {
		raw, err := cl.Get(ctx, tn.Idempotency("event", e.key)).Result()
		if err != nil || idemRecordID(raw, "") != e.id {
			c.failf("idempotency record of event key %s = %q (%v), want event %s", e.key, raw, err, e.id)
		}
		if got, _ := cl.HGet(ctx, tn.Event(e.id), "charged").Result(); got != strconv.FormatInt(e.charged, 10) {
			c.failf("event %s record charged %q, response said %d", e.id, got, e.charged)
		}
	}
	if expired != c.m.sweptExpired {
		c.failf("%d EXPIRED records, but the sweeps reported %d expiries", expired, c.m.sweptExpired)
	}

	after := c.env.counters(c.tt)
	for name, want := range map[string]int64{
		"cycles.reservations.created":   int64(len(c.m.resvs)),
		"cycles.reservations.committed": committed,
		"cycles.reservations.released":  released,
		"cycles.reservations.extended":  extended,
		"cycles.events.created":         int64(len(c.m.events)),
		"cycles.sweeper.outcomes":       expired,
	} {
		if got := after[name] - before[name]; got != want {
			c.failf("counter %s moved by %d, want %d", name, got, want)
		}
	}
}

// idemRecordID is the id an idempotency record names (lua/lib/idem.lua:
// <kind><hash>:<body>; kind 'p' drops the id prefix the caller names).
func idemRecordID(raw, idPrefix string) string {
	_, body, ok := strings.Cut(raw, ":")
	switch {
	case !ok || raw == "":
		return ""
	case raw[0] == 'i':
		return body
	case raw[0] == 'p':
		return idPrefix + body
	}
	return ""
}
