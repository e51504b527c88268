package property

import (
	"fmt"

	"pgregory.net/rapid"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/scope"
)

type opKind int

const (
	opReserve opKind = iota
	opCommit
	opRelease
	opExtend
	opEvent
	opSweep
	opDry // dry-run reserve or decide: must change nothing
)

func (k opKind) String() string {
	return [...]string{"reserve", "commit", "release", "extend", "event", "sweep", "dry"}[k]
}

// Commit actuals relative to the estimate.
const (
	actualBelow = iota
	actualAt
	actualAbove
)

// op is one drawn operation. Requests are built when the batch starts (from
// the state known then), so every draw happens on the test goroutine.
type op struct {
	kind opKind

	// reserve, event, dry
	subject int
	unit    string
	amount  int64
	ttl     *int64
	grace   *int64
	policy  string
	decide  bool // dry: Decide instead of a dry-run reserve

	// commit, release, extend
	target     *resv // nil: an id that never existed
	actualMode int
	actual     int64
	wrongUnit  bool
	extendBy   int64

	// retry re-sends an earlier request of the same kind verbatim (same
	// idempotency key and payload).
	retry bool

	// built request (exactly one is set)
	reserveReq *cyclesv1.CreateReservationRequest
	commitReq  *cyclesv1.CommitReservationRequest
	releaseReq *cyclesv1.ReleaseReservationRequest
	extendReq  *cyclesv1.ExtendReservationRequest
	eventReq   *cyclesv1.CreateEventRequest
	decideReq  *cyclesv1.DecideRequest
}

func (o *op) String() string {
	switch {
	case o.reserveReq != nil:
		r := o.reserveReq
		return fmt.Sprintf("%s key=%s subject=%d %s %d ttl=%v grace=%v policy=%q dry=%v retry=%v", o.kind, r.GetIdempotencyKey(), o.subject,
			r.GetEstimate().GetUnit(), r.GetEstimate().GetAmount(), ptr(r.TtlMs), ptr(r.GracePeriodMs), o.policy, r.GetDryRun(), o.retry)
	case o.commitReq != nil:
		return fmt.Sprintf("commit %s key=%s actual=%v retry=%v", o.commitReq.GetReservationId(), o.commitReq.GetIdempotencyKey(), o.commitReq.GetActual(), o.retry)
	case o.releaseReq != nil:
		return fmt.Sprintf("release %s key=%s retry=%v", o.releaseReq.GetReservationId(), o.releaseReq.GetIdempotencyKey(), o.retry)
	case o.extendReq != nil:
		return fmt.Sprintf("extend %s key=%s by=%d retry=%v", o.extendReq.GetReservationId(), o.extendReq.GetIdempotencyKey(), o.extendReq.GetExtendByMs(), o.retry)
	case o.eventReq != nil:
		r := o.eventReq
		return fmt.Sprintf("event key=%s subject=%d %s %d policy=%q retry=%v", r.GetIdempotencyKey(), o.subject, r.GetActual().GetUnit(), r.GetActual().GetAmount(), o.policy, o.retry)
	case o.decideReq != nil:
		return fmt.Sprintf("decide key=%s subject=%d %v", o.decideReq.GetIdempotencyKey(), o.subject, o.decideReq.GetEstimate())
	}
	return o.kind.String()
}

func ptr(p *int64) any {
	if p == nil {
		return "unset"
	}
	return *p
}

var action = &cyclesv1.Action{Kind: "llm.completion", Name: "model-x"}

func unitOf(u string) cyclesv1.Unit { return scope.ParseUnit(u) }

func policyOf(p string) cyclesv1.CommitOveragePolicy { return scope.ParsePolicy(p) }

// opMix weights the operation kinds (reserve first: rapid shrinks toward
// the first entry).
var opMix = weighted(map[opKind]int{opReserve: 30, opCommit: 22, opRelease: 8, opExtend: 9, opEvent: 17, opSweep: 6, opDry: 8})

func weighted(w map[opKind]int) []opKind {
	var out []opKind
	for k := opReserve; k <= opDry; k++ {
		for i := 0; i < w[k]; i++ {
			out = append(out, k)
		}
	}
	return out
}

// uniform7 is a uniform number in [0, 128). rapid's integers favour small
// values heavily (IntRange(0, 99) < 3 a quarter of the time) and SampledFrom
// favours the first entries, but its booleans are fair, so seven of them
// make a uniform 7-bit number. Shrinking drives them to false, i.e. to 0.
func uniform7(t *rapid.T, label string) int {
	v := 0
	for i := 0; i < 7; i++ {
		v <<= 1
		if rapid.Bool().Draw(t, label) {
			v |= 1
		}
	}
	return v
}

// chance is true with probability pct% (to 1/128); it shrinks to false.
func chance(t *rapid.T, pct int, label string) bool {
	return uniform7(t, label) >= 128-pct*128/100
}

// pick returns a near-uniform index into n entries (exactly uniform for
// n <= 128, coarser above); it shrinks to the first.
func pick(t *rapid.T, n int, label string) int {
	return uniform7(t, label) * n / 128
}

// drawRetry draws whether the operation repeats an earlier request of its
// kind (with the same idempotency key), and which one.
func drawRetry[R any](t *rapid.T, prevs []R) (R, bool) {
	if len(prevs) == 0 || !chance(t, 15, "retry") {
		var none R
		return none, false
	}
	return prevs[rapid.IntRange(0, len(prevs)-1).Draw(t, "retry_of")], true
}

// drawOp draws one operation against the state known at the batch start.
func (c *caseRun) drawOp(t *rapid.T) *op {
	w := c.w
	o := &op{kind: opMix[pick(t, len(opMix), "op")]}
	if (o.kind == opCommit || o.kind == opRelease || o.kind == opExtend) && len(c.m.resvs) == 0 {
		o.kind = opReserve
	}
	drawPolicy := func() string {
		if w.rejectOnly {
			return rapid.SampledFrom([]string{"", "REJECT"}).Draw(t, "policy")
		}
		return rapid.SampledFrom(policies).Draw(t, "policy")
	}
	drawUnit := func() string {
		if !chance(t, 10, "unit_outside_tree") {
			return rapid.SampledFrom(w.units).Draw(t, "unit")
		}
		return rapid.SampledFrom(scope.AllUnits()).Draw(t, "unit")
	}
	drawAmount := func(label string) {
		o.subject = w.drawSubject(t)
		o.unit = drawUnit()
		o.amount = rapid.Int64Range(0, 1500).Draw(t, label) * w.scale
	}
	switch o.kind {
	case opReserve:
		if prev, ok := drawRetry(t, c.m.reserveReqs); ok {
			o.retry, o.subject, o.policy, o.reserveReq = true, prev.subject, prev.policy, prev.req
			return o
		}
		drawAmount("estimate")
		switch n := pick(t, 4, "ttl"); {
		case n < 2:
			v := int64(1000) // the protocol minimum: expires within the case
			o.ttl = &v
		case n == 2:
			v := int64(60_000)
			o.ttl = &v
		} // 3: unset (the tenant default, 60 s)
		switch pick(t, 4, "grace") {
		case 0, 1:
			v := int64(0)
			o.grace = &v
		case 2:
			v := int64(300)
			o.grace = &v
		} // 3: unset (5000)
		o.policy = drawPolicy()
		c.seq++
		o.reserveReq = &cyclesv1.CreateReservationRequest{
			IdempotencyKey: fmt.Sprintf("rk-%d", c.seq), Subject: w.subjects[o.subject], Action: action,
			Estimate: &cyclesv1.Amount{Unit: unitOf(o.unit), Amount: o.amount}, TtlMs: o.ttl, GracePeriodMs: o.grace,
			OveragePolicy: policyOf(o.policy),
		}
	case opDry:
		drawAmount("estimate")
		o.decide = rapid.Bool().Draw(t, "decide")
		c.seq++
		est := &cyclesv1.Amount{Unit: unitOf(o.unit), Amount: o.amount}
		if o.decide {
			o.decideReq = &cyclesv1.DecideRequest{IdempotencyKey: fmt.Sprintf("dk-%d", c.seq), Subject: w.subjects[o.subject], Action: action, Estimate: est}
		} else {
			o.reserveReq = &cyclesv1.CreateReservationRequest{IdempotencyKey: fmt.Sprintf("dk-%d", c.seq), Subject: w.subjects[o.subject],
				Action: action, Estimate: est, DryRun: true}
		}
	case opEvent:
		if prev, ok := drawRetry(t, c.m.eventReqs); ok {
			o.retry, o.subject, o.policy, o.eventReq = true, prev.subject, prev.policy, prev.req
			return o
		}
		drawAmount("actual")
		o.policy = drawPolicy()
		c.seq++
		o.eventReq = &cyclesv1.CreateEventRequest{
			IdempotencyKey: fmt.Sprintf("ek-%d", c.seq), Subject: w.subjects[o.subject], Action: action,
			Actual: &cyclesv1.Amount{Unit: unitOf(o.unit), Amount: o.amount}, OveragePolicy: policyOf(o.policy),
		}
	case opSweep:
	case opCommit, opRelease, opExtend:
		var prevs []*settleReq
		switch o.kind {
		case opCommit:
			prevs = c.m.commitReqs
		case opRelease:
			prevs = c.m.releaseReqs
		default:
			prevs = c.m.extendReqs
		}
		if prev, ok := drawRetry(t, prevs); ok {
			o.retry, o.target, o.actualMode, o.wrongUnit = true, prev.target, prev.actualMode, prev.wrongUnit
			o.commitReq, o.releaseReq, o.extendReq = prev.commit, prev.release, prev.extend
			return o
		}
		rid := "00000000-0000-4000-8000-00000000dead"
		if !chance(t, 3, "unknown_id") {
			o.target = c.m.resvs[pick(t, len(c.m.resvs), "target")]
			rid = o.target.id
		}
		c.seq++
		switch o.kind {
		case opCommit:
			unit := "TOKENS"
			if o.target != nil {
				unit = o.target.unit
			}
			if chance(t, 3, "commit_wrong_unit") {
				o.wrongUnit = true
				for _, u := range scope.AllUnits() {
					if u != unit {
						unit = u
						break
					}
				}
			}
			var est int64
			if o.target != nil {
				est = o.target.estimate
			}
			o.actualMode = rapid.IntRange(actualBelow, actualAbove).Draw(t, "actual_vs_estimate")
			switch o.actualMode {
			case actualBelow:
				o.actual = est * rapid.Int64Range(0, 99).Draw(t, "actual_percent") / 100
			case actualAt:
				o.actual = est
			default:
				o.actual = est + rapid.Int64Range(1, 1500).Draw(t, "overage")*w.scale
			}
			o.commitReq = &cyclesv1.CommitReservationRequest{ReservationId: rid, IdempotencyKey: fmt.Sprintf("ck-%d", c.seq),
				Actual: &cyclesv1.Amount{Unit: unitOf(unit), Amount: o.actual}}
		case opRelease:
			o.releaseReq = &cyclesv1.ReleaseReservationRequest{ReservationId: rid, IdempotencyKey: fmt.Sprintf("lk-%d", c.seq), Reason: "property"}
		default:
			o.extendBy = rapid.Int64Range(1, 3000).Draw(t, "extend_by")
			o.extendReq = &cyclesv1.ExtendReservationRequest{ReservationId: rid, IdempotencyKey: fmt.Sprintf("xk-%d", c.seq), ExtendByMs: o.extendBy}
		}
	}
	return o
}
