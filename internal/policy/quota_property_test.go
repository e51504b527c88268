package policy_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/actionkind"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/sweeper"
	"github.com/cyclesgo/cycles-go/test/redistest"
	"github.com/cyclesgo/cycles-go/test/scripttest"
)

// quotaSeedEnv replays a failed TestQuotaProperty run: the failure prints the
// seed; CYCLES_QUOTA_SEED=<seed> go test -run TestQuotaProperty ./internal/policy/
// draws the same policies and operation lists again (the interleaving of the
// racing clients is the machine's).
const quotaSeedEnv = "CYCLES_QUOTA_SEED"

// Property bounds: rounds run until quotaBudget has passed on a backend
// (at least quotaMinRounds, at most quotaMaxRounds), so the test costs a few
// seconds per backend whatever the machine.
const (
	quotaBudget    = 3 * time.Second
	quotaMinRounds = 3
	quotaMaxRounds = 40
	quotaClients   = 8
	quotaOpsEach   = 8
	quotaEstimate  = 7
)

// The kinds the property draws from: two external side effects (they share
// a risk class), a side effect, a high-risk kind and an unregistered kind
// (classified side_effect).
var quotaKinds = []string{email, "message.slack.post", "llm.completion", "payment.charge", "acme.unlisted"}

var quotaWindows = []cyclesv1.ActionQuotaWindow{perRun, cyclesv1.ActionQuotaWindow_ACTION_QUOTA_WINDOW_PER_MINUTE_TUMBLING,
	perHour, perDay, perTDay}

var quotaRisks = []cyclesv1.ActionRiskClass{extSide, cyclesv1.ActionRiskClass_ACTION_RISK_CLASS_SIDE_EFFECT,
	cyclesv1.ActionRiskClass_ACTION_RISK_CLASS_HIGH_RISK}

// TestQuotaProperty (acceptance "Exactness"): random kinds, random action and
// risk-class quotas with random windows, access lists, and racing clients
// mixing live reserves, dry runs, observed reserves and decides, with
// releases, commits and expiries of what they were admitted. After each
// round, on every backend (the Cluster leg too):
//   - every counter stays within its quota, and the counters of each quota
//     sum to exactly the live admissions it governs, less the per_run counts
//     given back on release and expiry (never on commit, never for calendar
//     windows): nothing else (a dry run, an observed reserve, a decide, a
//     refusal) counted;
//   - a calendar counter that refused a call is at its limit (no
//     under-admission: calendar counters only grow);
//   - no kind outside an allowlist or inside a denylist was admitted;
//   - every budget holds exactly the live admissions still open or committed:
//     observed reserves, dry runs and decides never moved a budget.
func TestQuotaProperty(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(quotaSeedEnv); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s: %v", quotaSeedEnv, err)
		}
		seed = v
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("seed %d (replay: %s=%d)", seed, quotaSeedEnv, seed)
		}
	})
	kinds, err := actionkind.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	for bi, be := range redistest.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, uint64(bi)))
			start := time.Now()
			stats := map[string]int{}
			rounds := 0
			for ; rounds < quotaMaxRounds && (rounds < quotaMinRounds || time.Since(start) < quotaBudget); rounds++ {
				r := newQuotaRound(t, be, rng, kinds, rounds == 0)
				r.run()
				r.check()
				for k, v := range r.stats {
					stats[k] += v
				}
				if t.Failed() {
					t.Fatalf("round %d: policy %v", rounds, r.policy)
				}
			}
			t.Logf("%d rounds in %v: %v", rounds, time.Since(start).Round(time.Millisecond), stats)
			// The run must have exercised what it claims to check.
			for _, must := range []string{"live ALLOW", "ACTION_QUOTA_EXCEEDED", "observe", "dry", "decide", "release"} {
				if stats[must] == 0 {
					t.Errorf("no %q in %d rounds: %v", must, rounds, stats)
				}
			}
		})
	}
}

// quotaRound is one tenant, one random policy, and the racing clients' log.
type quotaRound struct {
	t      *testing.T
	e      *env
	kinds  *actionkind.Registry
	expiry bool // live reserves get a 1 s TTL and the round ends by sweeping them
	policy *cyclesv1.CreateScopePolicyRequest
	ops    [][]quotaOp

	mu        sync.Mutex
	admitted  []quotaAdmit
	refused   []*cyclesv1.DenyDetail // ACTION_QUOTA_EXCEEDED of live reserves
	listDeny  []string               // kinds refused by a list
	openHeld  map[string]int64       // scope path -> estimates held or spent by live admissions
	stats     map[string]int
	unexpired int   // admissions left open in an expiry round
	startMs   int64 // Redis's clock when the round began
}

type quotaOp struct {
	mode   string // live, dry, observe, decide
	subj   *cyclesv1.Subject
	kind   string
	run    string
	settle string // live: release, commit, keep
}

type quotaAdmit struct {
	op       quotaOp
	refunded bool // released or expired: per_run counts were given back
}

func newQuotaRound(t *testing.T, be redistest.Backend, rng *rand.Rand, kinds *actionkind.Registry, expiry bool) *quotaRound {
	t.Helper()
	r := &quotaRound{t: t, e: newEnvOn(t, be.Client), kinds: kinds, expiry: expiry, openHeld: map[string]int64{}, stats: map[string]int{}}
	p := &cyclesv1.CreateScopePolicyRequest{ScopePattern: "*", Name: "prop"}
	// Distinct (kind, window) and (class, window): two rules of one policy on
	// the same counter would make the model's limit ambiguous.
	seen := map[string]bool{}
	for range 1 + rng.IntN(4) {
		k, w := quotaKinds[rng.IntN(len(quotaKinds))], quotaWindows[rng.IntN(len(quotaWindows))]
		if !seen[k+w.String()] {
			seen[k+w.String()] = true
			p.ActionQuotas = append(p.ActionQuotas, aq(k, 1+rng.Int64N(6), w))
		}
	}
	for range rng.IntN(3) {
		c, w := quotaRisks[rng.IntN(len(quotaRisks))], quotaWindows[rng.IntN(len(quotaWindows))]
		if !seen[c.String()+w.String()] {
			seen[c.String()+w.String()] = true
			p.RiskClassQuotas = append(p.RiskClassQuotas, &cyclesv1.RiskClassQuota{RiskClass: c, MaxCalls: 1 + rng.Int64N(8), Window: w})
		}
	}
	switch rng.IntN(4) {
	case 0:
		p.AllowedActionKinds = pick(rng, quotaKinds, 1+rng.IntN(len(quotaKinds)-1))
	case 1:
		p.DeniedActionKinds = pick(rng, quotaKinds, 1)
	}
	r.policy = proto.Clone(p).(*cyclesv1.CreateScopePolicyRequest)
	r.e.create(p)
	subjects := []*cyclesv1.Subject{bot, prod}
	modes := []string{"live", "live", "live", "live", "dry", "observe", "decide"}
	settles := []string{"release", "commit", "keep", "keep"}
	r.ops = make([][]quotaOp, quotaClients)
	for c := range r.ops {
		for range quotaOpsEach {
			r.ops[c] = append(r.ops[c], quotaOp{mode: modes[rng.IntN(len(modes))], subj: subjects[rng.IntN(len(subjects))],
				kind: quotaKinds[rng.IntN(len(quotaKinds))], run: []string{"r1", "r2"}[rng.IntN(2)],
				settle: settles[rng.IntN(len(settles))]})
		}
	}
	return r
}

func pick(rng *rand.Rand, from []string, n int) []string {
	l := append([]string(nil), from...)
	rng.Shuffle(len(l), func(i, j int) { l[i], l[j] = l[j], l[i] })
	return l[:n]
}

// scopePath is subj's scope path under the round's tenant.
func (r *quotaRound) scopePath(subj *cyclesv1.Subject) string {
	p := "tenant:" + r.e.tenant + "/workspace:" + subj.GetWorkspace()
	if subj.GetAgent() != "" {
		p += "/agent:" + subj.GetAgent()
	}
	return p
}

// ancestors are the budgets a reserve of subj holds at.
func (r *quotaRound) ancestors(subj *cyclesv1.Subject) []string {
	out := []string{"tenant:" + r.e.tenant, "tenant:" + r.e.tenant + "/workspace:" + subj.GetWorkspace()}
	if subj.GetAgent() != "" {
		out = append(out, r.scopePath(subj))
	}
	return out
}

func (r *quotaRound) run() {
	r.startMs = r.e.redisNow()
	var wg sync.WaitGroup
	for c, ops := range r.ops {
		wg.Go(func() {
			for i, op := range ops {
				if err := r.do(fmt.Sprintf("c%d-%d", c, i), op); err != nil {
					r.t.Errorf("client %d op %d %+v: %v", c, i, op, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if r.expiry && r.unexpired > 0 {
		r.sweep()
	}
}

func (r *quotaRound) count(k string) {
	r.mu.Lock()
	r.stats[k]++
	r.mu.Unlock()
}

// do runs one operation and logs what it did.
func (r *quotaRound) do(key string, op quotaOp) error {
	ctx := r.e.ctx
	subj := proto.Clone(op.subj).(*cyclesv1.Subject)
	subj.Dimensions = map[string]string{"run_id": op.run}
	action := &cyclesv1.Action{Kind: op.kind, Name: "m"}
	est := &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: quotaEstimate}
	if op.mode == "decide" {
		d, err := call(ctx, func(ctx context.Context, q *cyclesv1.DecideRequest) (*cyclesv1.DecideResponse, error) {
			return r.e.led.Decide(ctx, r.e.tenant, q)
		}, &cyclesv1.DecideRequest{IdempotencyKey: key, Subject: subj, Action: action, Estimate: est})
		if err != nil {
			return err
		}
		r.count("decide")
		r.count("decide " + d.GetDecision().String())
		return nil
	}
	req := &cyclesv1.CreateReservationRequest{IdempotencyKey: key, Subject: subj, Action: action, Estimate: est, DryRun: op.mode == "dry"}
	if op.mode == "observe" {
		req.ObserveMode = cyclesv1.ObserveMode_OBSERVE_MODE_OBSERVE
	}
	if r.expiry {
		req.TtlMs, req.GracePeriodMs = proto.Int64(1000), proto.Int64(0)
	}
	resp, err := call(ctx, func(ctx context.Context, q *cyclesv1.CreateReservationRequest) (*cyclesv1.CreateReservationResponse, error) {
		return r.e.led.Reserve(ctx, r.e.tenant, q)
	}, req)
	if err != nil {
		ae, ok := apierr.As(err)
		if !ok || op.mode != "live" {
			return err
		}
		r.count(string(ae.Code))
		switch ae.Code {
		case "ACTION_QUOTA_EXCEEDED":
			dd, err := actionkind.ParseDenyDetail(ae.Details[actionkind.MetadataKey])
			if err != nil {
				return err
			}
			r.mu.Lock()
			r.refused = append(r.refused, dd)
			r.mu.Unlock()
		case "ACTION_KIND_DENIED", "ACTION_KIND_NOT_ALLOWED":
			r.mu.Lock()
			r.listDeny = append(r.listDeny, op.kind)
			r.mu.Unlock()
		default:
			return err
		}
		return nil
	}
	if op.mode != "live" {
		if resp.GetReservationId() != "" {
			return fmt.Errorf("%s reserve holds %s", op.mode, resp.GetReservationId())
		}
		r.count(op.mode)
		r.count(op.mode + " " + resp.GetDecision().String())
		return nil
	}
	if resp.GetDecision() != cyclesv1.Decision_DECISION_ALLOW {
		return fmt.Errorf("live reserve: %v", resp)
	}
	r.count("live ALLOW")
	a := quotaAdmit{op: op}
	settle := op.settle
	if r.expiry { // a release or commit could meet the 1 s TTL on a loaded machine
		settle = "expire"
	}
	switch settle {
	case "release":
		_, err = call(ctx, func(ctx context.Context, q *cyclesv1.ReleaseReservationRequest) (*cyclesv1.ReleaseReservationResponse, error) {
			return r.e.led.Release(ctx, r.e.tenant, q)
		}, &cyclesv1.ReleaseReservationRequest{ReservationId: resp.GetReservationId(), IdempotencyKey: key + "-rel"})
		a.refunded = true
	case "commit":
		_, err = call(ctx, func(ctx context.Context, q *cyclesv1.CommitReservationRequest) (*cyclesv1.CommitReservationResponse, error) {
			return r.e.led.Commit(ctx, r.e.tenant, q)
		}, &cyclesv1.CommitReservationRequest{ReservationId: resp.GetReservationId(), IdempotencyKey: key + "-com", Actual: est})
	case "expire":
		a.refunded = true
	}
	if err != nil {
		return fmt.Errorf("%s: %w", settle, err)
	}
	r.count(settle)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.admitted = append(r.admitted, a)
	if settle == "expire" {
		r.unexpired++
	}
	if !a.refunded {
		for _, s := range r.ancestors(op.subj) {
			r.openHeld[s] += quotaEstimate
		}
	}
	return nil
}

// sweep waits out the 1 s TTL of the open reservations and expires them.
func (r *quotaRound) sweep() {
	exec := scripttest.On(r.t, r.e.rdb)
	sw := sweeper.New(exec, sweeper.Options{})
	for expired := int64(0); expired < int64(r.unexpired); {
		time.Sleep(250 * time.Millisecond)
		cnt, _, err := sw.SweepTenant(r.e.ctx, r.e.tenant)
		if err != nil {
			r.t.Fatal(err)
		}
		expired += cnt.Expired
	}
}

// quotaRule is one rule of the round's policy as the model sees it.
type quotaRule struct {
	target string // kind, or "__risk__:<class>"
	window cyclesv1.ActionQuotaWindow
	max    int64
}

func (r *quotaRound) rules() []quotaRule {
	var out []quotaRule
	for _, q := range r.policy.GetActionQuotas() {
		out = append(out, quotaRule{q.GetActionKind(), q.GetWindow(), q.GetMaxCalls()})
	}
	for _, q := range r.policy.GetRiskClassQuotas() {
		out = append(out, quotaRule{"__risk__:" + string(actionkind.RiskOf(q.GetRiskClass())), q.GetWindow(), q.GetMaxCalls()})
	}
	return out
}

// governs reports whether rule applies to a call of kind.
func (r *quotaRound) governs(rule quotaRule, kind string) bool {
	return rule.target == kind || rule.target == "__risk__:"+string(r.kinds.Classify(kind).Risk)
}

// counterClass names a rule's counters at a scope, over all window keys.
func counterClass(scope, target string, w cyclesv1.ActionQuotaWindow) string {
	return scope + "|" + target + "|" + w.String()
}

func (r *quotaRound) check() {
	t, e := r.t, r.e
	// The counters, through the operator listing.
	got := map[string]int64{}        // class -> sum of used
	byKey := map[string]int64{}      // class|window key -> used
	limits := map[string]int64{}     // class -> limit
	for _, rule := range r.rules() { // a class's limit is its rule's max_calls
		for _, s := range []string{"tenant:" + e.tenant, r.scopePath(bot), r.scopePath(prod)} {
			limits[counterClass(s, rule.target, rule.window)] = rule.max
		}
	}
	for cur := ""; ; {
		page := must(t, e.pol.ListActionQuotaCounters, e.ctx, &cyclesv1.ListActionQuotaCountersRequest{TenantId: e.tenant, Limit: 200, Cursor: cur})
		for _, c := range page.GetCounters() {
			target := c.GetActionKind()
			if target == actionkind.RiskCounter {
				target += ":" + string(actionkind.RiskOf(c.GetRiskClass()))
			}
			class := counterClass(c.GetScope(), target, c.GetWindow())
			lim, ok := limits[class]
			if !ok {
				t.Errorf("counter %s belongs to no rule", class)
				continue
			}
			if c.GetUsed() > lim || c.GetUsed() < 0 {
				t.Errorf("counter %s|%s: used %d, quota %d", class, c.GetWindowKey(), c.GetUsed(), lim)
			}
			got[class] += c.GetUsed()
			byKey[class+"|"+c.GetWindowKey()] = c.GetUsed()
		}
		if !page.GetHasMore() {
			break
		}
		cur = page.GetNextCursor()
	}
	rolled := r.rolledWindows(r.e.redisNow())
	// The model: every live admission counts once on each rule governing its
	// kind, at the request's scope (the tenant for per_tenant_per_day);
	// per_run counts come back on release and expiry.
	want := map[string]int64{}
	for _, a := range r.admitted {
		for _, rule := range r.rules() {
			if !r.governs(rule, a.op.kind) || (a.refunded && rule.window == perRun) {
				continue
			}
			scope := r.scopePath(a.op.subj)
			if rule.window == perTDay {
				scope = "tenant:" + e.tenant
			}
			want[counterClass(scope, rule.target, rule.window)]++
		}
	}
	for _, k := range union(got, want) {
		// A calendar window that rolled over during the round started again
		// from zero: its counter holds only the admissions since.
		if w := k[strings.LastIndexByte(k, '|')+1:]; rolled[w] {
			r.count("window rolled")
			if got[k] > want[k] {
				t.Errorf("counters of %s sum to %d (the window rolled over), more than the %d admissions they govern", k, got[k], want[k])
			}
			continue
		}
		if got[k] != want[k] {
			t.Errorf("counters of %s sum to %d, the admissions they govern to %d", k, got[k], want[k])
		}
	}
	// A calendar counter that refused is full: it only grows in a window.
	for _, dd := range r.refused {
		q := dd.GetQuotaViolation()
		if q.GetUsed() < q.GetLimit() {
			t.Errorf("refused below the limit: %v", q)
		}
		if q.GetWindow() == perRun || rolled[q.GetWindow().String()] {
			continue
		}
		target := q.GetActionKind()
		if q.GetRiskClass() != cyclesv1.ActionRiskClass_ACTION_RISK_CLASS_UNSPECIFIED {
			target = "__risk__:" + string(actionkind.RiskOf(q.GetRiskClass()))
		}
		k := counterClass(q.GetScope(), target, q.GetWindow()) + "|" + q.GetWindowKey()
		if byKey[k] != q.GetLimit() {
			t.Errorf("counter %s refused a call but holds %d of %d", k, byKey[k], q.GetLimit())
		}
	}
	// Lists: nothing outside an allowlist or inside a denylist got through,
	// and what they refused they had to.
	banned := func(kind string) bool {
		if l := r.policy.GetAllowedActionKinds(); len(l) > 0 {
			return !slices.Contains(l, kind)
		}
		return slices.Contains(r.policy.GetDeniedActionKinds(), kind)
	}
	for _, a := range r.admitted {
		if banned(a.op.kind) {
			t.Errorf("%s admitted under lists %v / %v", a.op.kind, r.policy.GetAllowedActionKinds(), r.policy.GetDeniedActionKinds())
		}
	}
	for _, k := range r.listDeny {
		if !banned(k) {
			t.Errorf("%s refused by a list it is not on", k)
		}
	}
	// Budgets: exactly the live admissions still held or spent.
	for _, s := range []string{"tenant:" + e.tenant, r.scopePath(prod), r.scopePath(bot)} {
		b := must(t, e.adm.GetBudget, e.ctx, &cyclesv1.GetBudgetRequest{TenantId: e.tenant, ScopePath: s, Unit: cyclesv1.Unit_UNIT_TOKENS}).GetBudget()
		if b.GetReserved()+b.GetSpent() != r.openHeld[s] || b.GetRemaining() != b.GetAllocated()-r.openHeld[s] {
			t.Errorf("budget %s: reserved %d spent %d remaining %d, live admissions hold %d", s, b.GetReserved(), b.GetSpent(), b.GetRemaining(), r.openHeld[s])
		}
	}
}

// rolledWindows names the calendar windows (as ActionQuotaWindow.String())
// whose instance at endMs differs from the one at the round's start: a
// round straddling a minute boundary leaves the per-minute counters holding
// only the calls since it (CI met it once: 2 counted of 3 admitted).
func (r *quotaRound) rolledWindows(endMs int64) map[string]bool {
	lengths := map[cyclesv1.ActionQuotaWindow]int64{
		cyclesv1.ActionQuotaWindow_ACTION_QUOTA_WINDOW_PER_MINUTE_TUMBLING: 60_000,
		perHour: 3_600_000, perDay: 86_400_000, perTDay: 86_400_000,
	}
	rolled := map[string]bool{}
	for w, n := range lengths {
		rolled[w.String()] = r.startMs/n != endMs/n
	}
	return rolled
}

func union(a, b map[string]int64) []string {
	var out []string
	for k := range a {
		out = append(out, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}
