package property

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"sort"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/scope"
	"github.com/cyclesgo/cycles-go/internal/sweeper"
	"github.com/cyclesgo/cycles-go/internal/validate"
)

// resv is what the test knows about one reservation it created.
type resv struct {
	id        string
	unit      string
	estimate  int64
	policy    string   // resolved overage policy
	budgeted  []string // budget ids held, canonical order
	expiresAt int64    // at creation
	graceMs   int64
	keys      map[string]bool // reserve keys that returned it

	commitKey     string
	charged       int64
	releaseKey    string
	extends       map[string]extendOK // distinct successful extend keys
	maxExtRefused bool
}

type extendOK struct{ by, expiresAt int64 }

type eventRec struct {
	id       string
	charged  int64
	budgeted []string
	key      string
}

// settleReq is an earlier commit / release / extend request, for retries.
type settleReq struct {
	target     *resv
	actualMode int
	wrongUnit  bool
	commit     *cyclesv1.CommitReservationRequest
	release    *cyclesv1.ReleaseReservationRequest
	extend     *cyclesv1.ExtendReservationRequest
}

type subjReq[T any] struct {
	subject int
	policy  string
	req     T
}

// model is everything the case observed, to check the ledger against.
type model struct {
	resvs        []*resv
	byID         map[string]*resv
	reserveByKey map[string]*resv
	keyBatch     map[string]int // first batch in which a key succeeded (any endpoint)
	events       map[string]*eventRec
	eventByKey   map[string]*eventRec
	charged      map[string]*big.Int // budget id -> sum charged (commits + events)
	overdraftUse map[string]bool     // budget id -> an ALLOW_WITH_OVERDRAFT charge may have hit it
	sweptExpired int64

	reserveReqs []subjReq[*cyclesv1.CreateReservationRequest]
	eventReqs   []subjReq[*cyclesv1.CreateEventRequest]
	commitReqs  []*settleReq
	releaseReqs []*settleReq
	extendReqs  []*settleReq
}

func newModel() *model {
	return &model{
		byID: map[string]*resv{}, reserveByKey: map[string]*resv{}, keyBatch: map[string]int{},
		events: map[string]*eventRec{}, eventByKey: map[string]*eventRec{},
		charged: map[string]*big.Int{}, overdraftUse: map[string]bool{},
	}
}

func (m *model) charge(budgets []string, amount int64) {
	for _, b := range budgets {
		if m.charged[b] == nil {
			m.charged[b] = new(big.Int)
		}
		m.charged[b].Add(m.charged[b], big.NewInt(amount))
	}
}

// outcome is one executed operation.
type outcome struct {
	op      *op
	resp    proto.Message
	counts  sweeper.Counts
	err     error
	started time.Time
}

// execute runs one operation through the ledger (or the sweeper).
func (c *caseRun) execute(ctx context.Context, o *op) outcome {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	out := outcome{op: o, started: time.Now()}
	tenant := c.w.tenant
	switch {
	case o.kind == opSweep:
		out.counts, out.err = c.env.sweeper.SweepOnce(ctx)
	case o.reserveReq != nil:
		out.resp, out.err = c.env.ledger.Reserve(ctx, tenant, o.reserveReq)
	case o.decideReq != nil:
		out.resp, out.err = c.env.ledger.Decide(ctx, tenant, o.decideReq)
	case o.commitReq != nil:
		out.resp, out.err = c.env.ledger.Commit(ctx, tenant, o.commitReq)
	case o.releaseReq != nil:
		out.resp, out.err = c.env.ledger.Release(ctx, tenant, o.releaseReq)
	case o.extendReq != nil:
		out.resp, out.err = c.env.ledger.Extend(ctx, tenant, o.extendReq)
	case o.eventReq != nil:
		out.resp, out.err = c.env.ledger.CreateEvent(ctx, tenant, o.eventReq)
	}
	return out
}

// request returns the op's request (nil for a sweep).
func (o *op) request() proto.Message {
	for _, m := range []proto.Message{o.reserveReq, o.commitReq, o.releaseReq, o.extendReq, o.eventReq, o.decideReq} {
		if m != nil && !isNil(m) {
			return m
		}
	}
	return nil
}

func isNil(m proto.Message) bool { return m == nil || !m.ProtoReflect().IsValid() }

// runBatch runs ops concurrently and folds the outcomes into the model.
func (c *caseRun) runBatch(ctx context.Context, ops []*op) {
	c.batch++
	// Every generated request is one the API would accept.
	for _, o := range ops {
		if r := o.request(); r != nil {
			if err := validate.Message(r); err != nil {
				c.failf("generated an invalid request %s: %v", o, err)
			}
		}
		c.noteOverdraft(o)
	}
	outs := make([]outcome, len(ops))
	var wg sync.WaitGroup
	for i, o := range ops {
		wg.Add(1)
		go func(i int, o *op) {
			defer wg.Done()
			outs[i] = c.execute(ctx, o)
		}(i, o)
	}
	wg.Wait()
	for _, out := range outs {
		c.fold(out)
	}
}

// noteOverdraft marks the budgets an ALLOW_WITH_OVERDRAFT charge may hit:
// only those may ever have remaining < 0.
func (c *caseRun) noteOverdraft(o *op) {
	switch {
	case o.commitReq != nil && o.target != nil && o.target.policy == "ALLOW_WITH_OVERDRAFT":
		for _, b := range o.target.budgeted {
			c.m.overdraftUse[b] = true
		}
	case o.eventReq != nil && c.w.resolve(o.policy) == "ALLOW_WITH_OVERDRAFT":
		for _, b := range c.w.budgetsFor(o.subject, scope.UnitKey(o.eventReq.GetActual().GetUnit())) {
			c.m.overdraftUse[b.id()] = true
		}
	}
}

func codeOf(err error) apierr.Code {
	if ae, ok := apierr.As(err); ok {
		return ae.Code
	}
	return ""
}

// succeededEarlier reports whether key succeeded in an earlier batch: a
// retry of it must replay, whatever happened since (docs/protocol.md#idempotency-and-replay).
func (c *caseRun) succeededEarlier(key string) bool {
	b, ok := c.m.keyBatch[key]
	return ok && b < c.batch
}

func (c *caseRun) succeeded(key string) {
	if _, ok := c.m.keyBatch[key]; !ok {
		c.m.keyBatch[key] = c.batch
	}
}

// fold checks one outcome and records its effects.
func (c *caseRun) fold(out outcome) {
	o := out.op
	stat := o.kind.String()
	switch {
	case o.retry:
		stat += " (retry)"
	case o.commitReq != nil:
		stat += [...]string{" below", " at", " above"}[o.actualMode]
	}
	if out.err != nil {
		stat += " " + string(codeOf(out.err))
	} else {
		stat += " ok"
	}
	if o.kind == opSweep {
		stat = fmt.Sprintf("sweep expired>0=%v", out.counts.Expired > 0)
	}
	c.env.stats[stat]++
	if out.err != nil {
		if _, ok := apierr.As(out.err); !ok || errors.Is(out.err, context.DeadlineExceeded) {
			c.failf("%s: unexpected error %v", o, out.err)
			return
		}
	}
	switch {
	case o.kind == opSweep:
		if out.err != nil {
			c.failf("sweep: %v", out.err)
		}
		if out.counts.Quarantined != 0 {
			c.failf("sweep quarantined %d reservations of a sound ledger", out.counts.Quarantined)
		}
		c.m.sweptExpired += out.counts.Expired
	case o.kind == opDry:
		c.foldDry(out)
	case o.reserveReq != nil:
		c.foldReserve(out)
	case o.commitReq != nil:
		c.foldCommit(out)
	case o.releaseReq != nil:
		c.foldRelease(out)
	case o.extendReq != nil:
		c.foldExtend(out)
	case o.eventReq != nil:
		c.foldEvent(out)
	}
}

// budgetIDs of the balances in a response, in order.
func budgetIDs(bs []*cyclesv1.Balance) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = b.GetScopePath() + "|" + scope.UnitKey(b.GetReserved().GetUnit())
	}
	return out
}

func specIDs(bs []budgetSpec) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = b.id()
	}
	return out
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// checkNoBudgetCode checks a refusal against the model's budgets for a
// request in unit at subject: budget refusals need a budget in the unit,
// NOT_FOUND needs none in any unit, UNIT_MISMATCH none in the unit but one in
// another.
func (c *caseRun) checkBudgetRefusal(o *op, unit string, code apierr.Code, allowed ...apierr.Code) {
	have := len(c.w.budgetsFor(o.subject, unit)) > 0
	other := c.w.anyOtherUnit(o.subject, unit)
	switch code {
	case apierr.NotFound:
		if have || other {
			c.failf("%s: NOT_FOUND, but budgets exist at its scopes", o)
		}
		return
	case apierr.UnitMismatch:
		if have || !other {
			c.failf("%s: UNIT_MISMATCH, but the model has in-unit=%v other-unit=%v", o, have, other)
		}
		return
	}
	for _, a := range allowed {
		if code == a {
			if !have {
				c.failf("%s: %s without any budget in %s", o, code, unit)
			}
			return
		}
	}
	c.failf("%s: unexpected refusal %s", o, code)
}

func (c *caseRun) foldReserve(out outcome) {
	o, req := out.op, out.op.reserveReq
	unit := scope.UnitKey(req.GetEstimate().GetUnit())
	key := req.GetIdempotencyKey()
	want := c.w.budgetsFor(o.subject, unit)
	if !o.retry {
		c.m.reserveReqs = append(c.m.reserveReqs, subjReq[*cyclesv1.CreateReservationRequest]{o.subject, o.policy, req})
	}
	if out.err != nil {
		if c.succeededEarlier(key) {
			c.failf("%s: retry of a successful key refused with %v (must replay)", o, out.err)
		}
		c.checkBudgetRefusal(o, unit, codeOf(out.err), apierr.BudgetExceeded, apierr.OverdraftLimitExceeded, apierr.DebtOutstanding)
		return
	}
	resp := out.resp.(*cyclesv1.CreateReservationResponse)
	rid := resp.GetReservationId()
	if rid == "" || resp.GetDecision() != cyclesv1.Decision_DECISION_ALLOW {
		c.failf("%s: live reserve answered %v", o, resp)
		return
	}
	if len(want) == 0 {
		c.failf("%s: reserved %s with no budget in %s at its scopes", o, rid, unit)
	}
	if got := budgetIDs(resp.GetBalances()); !equalStrings(got, specIDs(want)) {
		c.failf("%s: held budgets %q, want %q", o, got, specIDs(want))
	}
	d := c.w.derived[o.subject]
	if resp.GetScopePath() != d.Path || !equalStrings(resp.GetAffectedScopes(), d.Affected) {
		c.failf("%s: scope %q %q, want %q %q", o, resp.GetScopePath(), resp.GetAffectedScopes(), d.Path, d.Affected)
	}
	if resp.GetReserved().GetAmount() != req.GetEstimate().GetAmount() {
		c.failf("%s: reserved %v", o, resp.GetReserved())
	}
	policy := scope.PolicyKey(resp.GetOveragePolicy())
	if policy != c.w.resolve(o.policy) {
		c.failf("%s: resolved policy %s, want %s", o, policy, c.w.resolve(o.policy))
	}
	if prev, ok := c.m.reserveByKey[key]; ok {
		if prev.id != rid {
			c.failf("idempotency key %s made two reservations: %s and %s", key, prev.id, rid)
		}
		return
	}
	if _, dup := c.m.byID[rid]; dup {
		c.failf("%s: a fresh key returned the existing reservation %s", o, rid)
		return
	}
	r := &resv{id: rid, unit: unit, estimate: req.GetEstimate().GetAmount(), policy: policy, budgeted: specIDs(want),
		expiresAt: resp.GetExpiresAtMs(), graceMs: resp.GetGracePeriodMs(),
		keys: map[string]bool{key: true}, extends: map[string]extendOK{}}
	c.m.resvs = append(c.m.resvs, r)
	c.m.byID[rid] = r
	c.m.reserveByKey[key] = r
	c.succeeded(key)
}

func (c *caseRun) foldDry(out outcome) {
	o := out.op
	unit := o.unit
	if out.err != nil {
		if codeOf(out.err) != apierr.UnitMismatch {
			c.failf("%s: refused with %v (dry runs and decide answer DENY)", o, out.err)
			return
		}
		c.checkBudgetRefusal(o, unit, apierr.UnitMismatch)
		return
	}
	var decision cyclesv1.Decision
	var reason string
	switch r := out.resp.(type) {
	case *cyclesv1.CreateReservationResponse:
		if r.GetReservationId() != "" || r.GetExpiresAtMs() != 0 {
			c.failf("%s: a dry run made reservation %q", o, r.GetReservationId())
		}
		decision, reason = r.GetDecision(), r.GetReasonCode()
	case *cyclesv1.DecideResponse:
		decision, reason = r.GetDecision(), r.GetReasonCode()
	}
	if len(c.w.budgetsFor(o.subject, unit)) == 0 && (decision != cyclesv1.Decision_DECISION_DENY || reason != "BUDGET_NOT_FOUND") {
		c.failf("%s: %v %q with no budget at all", o, decision, reason)
	}
}

// rememberSettle keeps a commit, release or extend that is not itself a
// retry among the requests later operations may retry (drawOp).
func (c *caseRun) rememberSettle(o *op) {
	if o.retry {
		return
	}
	r := &settleReq{target: o.target, actualMode: o.actualMode, wrongUnit: o.wrongUnit,
		commit: o.commitReq, release: o.releaseReq, extend: o.extendReq}
	switch o.kind {
	case opCommit:
		c.m.commitReqs = append(c.m.commitReqs, r)
	case opRelease:
		c.m.releaseReqs = append(c.m.releaseReqs, r)
	case opExtend:
		c.m.extendReqs = append(c.m.extendReqs, r)
	}
}

// settleCommon checks what commit, release and extend share: the bogus id,
// the retry rule (mustReplay: the key's replay window is still open).
func (c *caseRun) settleCommon(out outcome, key string, mustReplay bool) bool {
	o := out.op
	if o.target == nil {
		if codeOf(out.err) != apierr.NotFound {
			c.failf("%s: unknown reservation answered %v", o, out.err)
		}
		return false
	}
	if out.err != nil && mustReplay && c.succeededEarlier(key) {
		c.failf("%s: retry of a successful key refused with %v (must replay)", o, out.err)
	}
	return true
}

func (c *caseRun) foldCommit(out outcome) {
	o, req := out.op, out.op.commitReq
	c.rememberSettle(o)
	key := req.GetIdempotencyKey()
	if !c.settleCommon(out, key, true) { // commit keys live on the record (30 d)
		return
	}
	r := o.target
	A, E := req.GetActual().GetAmount(), r.estimate
	if out.err != nil {
		code := codeOf(out.err)
		switch {
		case code == apierr.ReservationFinalized || code == apierr.ReservationExpired:
		case code == apierr.UnitMismatch && o.wrongUnit:
		case code == apierr.BudgetExceeded && r.policy == "REJECT" && A > E && !o.wrongUnit:
		case code == apierr.OverdraftLimitExceeded && r.policy == "ALLOW_WITH_OVERDRAFT" && A > E && !o.wrongUnit:
		default:
			c.failf("%s (estimate %d, policy %s): unexpected refusal %v", o, E, r.policy, out.err)
		}
		return
	}
	resp := out.resp.(*cyclesv1.CommitReservationResponse)
	charged := resp.GetCharged().GetAmount()
	switch {
	case o.wrongUnit:
		c.failf("%s: committed in the wrong unit", o)
	case A <= E:
		if charged != A || resp.GetReleased().GetAmount() != E-A {
			c.failf("%s (estimate %d): charged %d released %v, want %d and %d", o, E, charged, resp.GetReleased(), A, E-A)
		}
	case r.policy == "REJECT":
		c.failf("%s: REJECT committed %d over the estimate %d", o, A, E)
	case charged < E || charged > A:
		c.failf("%s (estimate %d): charged %d outside [estimate, actual]", o, E, charged)
	}
	if r.policy != "ALLOW_WITH_OVERDRAFT" && resp.GetDebtIncurred() != 0 {
		c.failf("%s: policy %s incurred debt %d", o, r.policy, resp.GetDebtIncurred())
	}
	switch {
	case r.releaseKey != "":
		c.failf("reservation %s both RELEASED (key %s) and COMMITTED (key %s)", r.id, r.releaseKey, key)
	case r.commitKey == "":
		r.commitKey, r.charged = key, charged
		c.m.charge(r.budgeted, charged)
	case r.commitKey != key:
		c.failf("reservation %s committed twice, with keys %s and %s", r.id, r.commitKey, key)
	case r.charged != charged:
		c.failf("commit replay of %s charged %d, the original %d", r.id, charged, r.charged)
	}
	c.succeeded(key)
}

func (c *caseRun) foldRelease(out outcome) {
	o, req := out.op, out.op.releaseReq
	c.rememberSettle(o)
	key := req.GetIdempotencyKey()
	if !c.settleCommon(out, key, true) { // release keys live on the record (30 d)
		return
	}
	r := o.target
	if out.err != nil {
		if code := codeOf(out.err); code != apierr.ReservationFinalized && code != apierr.ReservationExpired {
			c.failf("%s: unexpected refusal %v", o, out.err)
		}
		return
	}
	resp := out.resp.(*cyclesv1.ReleaseReservationResponse)
	if resp.GetReleased().GetAmount() != r.estimate {
		c.failf("%s: released %v, want the estimate %d", o, resp.GetReleased(), r.estimate)
	}
	switch {
	case r.commitKey != "":
		c.failf("reservation %s both COMMITTED (key %s) and RELEASED (key %s)", r.id, r.commitKey, key)
	case r.releaseKey == "":
		r.releaseKey = key
	case r.releaseKey != key:
		c.failf("reservation %s released twice, with keys %s and %s", r.id, r.releaseKey, key)
	}
	c.succeeded(key)
}

func (c *caseRun) foldExtend(out outcome) {
	o, req := out.op, out.op.extendReq
	c.rememberSettle(o)
	key := req.GetIdempotencyKey()
	// An extend is replayable until the expiry it set (+ grace),
	// docs/protocol.md#idempotency-and-replay; after that a retry is a new
	// request on an expired reservation.
	mustReplay := false
	if o.target != nil {
		if prev, ok := o.target.extends[key]; ok {
			mustReplay = out.started.UnixMilli() < prev.expiresAt+o.target.graceMs-50
		}
	}
	if !c.settleCommon(out, key, mustReplay) {
		return
	}
	r := o.target
	if out.err != nil {
		switch codeOf(out.err) {
		case apierr.ReservationFinalized, apierr.ReservationExpired:
		case apierr.MaxExtensionsExceeded:
			r.maxExtRefused = true
		default:
			c.failf("%s: unexpected refusal %v", o, out.err)
		}
		return
	}
	resp := out.resp.(*cyclesv1.ExtendReservationResponse)
	exp := resp.GetExpiresAtMs()
	if exp <= r.expiresAt {
		c.failf("%s: expires_at %d not after the original %d", o, exp, r.expiresAt)
	}
	if prev, ok := r.extends[key]; ok {
		if prev.expiresAt != exp {
			c.failf("extend replay %s of %s answered expires_at %d, the original %d", key, r.id, exp, prev.expiresAt)
		}
	} else {
		r.extends[key] = extendOK{by: req.GetExtendByMs(), expiresAt: exp}
	}
	c.succeeded(key)
}

func (c *caseRun) foldEvent(out outcome) {
	o, req := out.op, out.op.eventReq
	if !o.retry {
		c.m.eventReqs = append(c.m.eventReqs, subjReq[*cyclesv1.CreateEventRequest]{o.subject, o.policy, req})
	}
	unit := scope.UnitKey(req.GetActual().GetUnit())
	key := req.GetIdempotencyKey()
	policy := c.w.resolve(o.policy)
	if out.err != nil {
		if c.succeededEarlier(key) {
			c.failf("%s: retry of a successful key refused with %v (must replay)", o, out.err)
		}
		code := codeOf(out.err)
		switch {
		case code == apierr.BudgetExceeded && policy != "REJECT",
			code == apierr.OverdraftLimitExceeded && policy != "ALLOW_WITH_OVERDRAFT":
			c.failf("%s: %s under policy %s", o, code, policy)
		}
		c.checkBudgetRefusal(o, unit, code, apierr.BudgetExceeded, apierr.OverdraftLimitExceeded)
		return
	}
	resp := out.resp.(*cyclesv1.CreateEventResponse)
	A := req.GetActual().GetAmount()
	charged := A
	if resp.GetCharged() != nil {
		charged = resp.GetCharged().GetAmount()
	}
	want := c.w.budgetsFor(o.subject, unit)
	switch {
	case len(want) == 0:
		c.failf("%s: applied with no budget in %s", o, unit)
	case charged < 0 || charged > A:
		c.failf("%s: charged %d of %d", o, charged, A)
	case policy == "REJECT" && charged != A:
		c.failf("%s: REJECT charged %d of %d", o, charged, A)
	case policy != "ALLOW_WITH_OVERDRAFT" && resp.GetDebtIncurred() != 0:
		c.failf("%s: policy %s incurred debt %d", o, policy, resp.GetDebtIncurred())
	}
	if got := budgetIDs(resp.GetBalances()); !equalStrings(got, specIDs(want)) {
		c.failf("%s: charged budgets %q, want %q", o, got, specIDs(want))
	}
	if prev, ok := c.m.eventByKey[key]; ok {
		if prev.id != resp.GetEventId() || prev.charged != charged {
			c.failf("idempotency key %s: event %s charged %d, then %s charged %d", key, prev.id, prev.charged, resp.GetEventId(), charged)
		}
		return
	}
	if _, dup := c.m.events[resp.GetEventId()]; dup || resp.GetEventId() == "" {
		c.failf("%s: event id %q is not new", o, resp.GetEventId())
		return
	}
	e := &eventRec{id: resp.GetEventId(), charged: charged, budgeted: specIDs(want), key: key}
	c.m.events[e.id] = e
	c.m.eventByKey[key] = e
	c.m.charge(e.budgeted, charged)
	c.succeeded(key)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
