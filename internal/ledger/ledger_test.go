package ledger_test

import (
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/reservationid"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
)

func TestReserveResponse(t *testing.T) {
	e := newFundedEnv(t, 1000)
	e.budget(ledgertest.Budget{Scope: e.scope("workspace:prod"), Allocated: 500})
	r := e.mustReserve("k1", 100, withSubject(&cyclesv1.Subject{Workspace: "Prod", Agent: "bot"}))
	if owner, ok := reservationid.Owner(r.ReservationId); !ok || owner != e.tenant || len(r.ReservationId) > 128 {
		t.Fatalf("reservation id %q does not name its owner %s", r.ReservationId, e.tenant)
	}
	if r.GetDecision() != cyclesv1.Decision_DECISION_ALLOW || r.GetReserved().GetAmount() != 100 ||
		r.GetRemainingTtlMs() != 60000 || r.GetGracePeriodMs() != 5000 ||
		r.GetOveragePolicy() != cyclesv1.CommitOveragePolicy_COMMIT_OVERAGE_POLICY_ALLOW_IF_AVAILABLE {
		t.Fatalf("response = %v", r)
	}
	wantPath := e.scope("workspace:prod/agent:bot")
	if r.GetScopePath() != wantPath || len(r.GetAffectedScopes()) != 3 || r.GetAffectedScopes()[2] != wantPath {
		t.Fatalf("scopes = %s %v", r.GetScopePath(), r.GetAffectedScopes())
	}
	if len(r.GetBalances()) != 2 {
		t.Fatalf("balances = %v (only budgeted scopes)", r.GetBalances())
	}
	b := r.GetBalances()[1]
	if b.GetScope() != "workspace:prod" || b.GetScopePath() != e.scope("workspace:prod") || b.GetRemaining().GetAmount() != 400 ||
		b.GetReserved().GetAmount() != 100 || b.GetAllocated().GetAmount() != 500 || b.GetRemaining().GetUnit() != cyclesv1.Unit_UNIT_TOKENS {
		t.Fatalf("balance = %v", b)
	}

	// Caps of the deepest derived scope make it ALLOW_WITH_CAPS.
	e.budget(ledgertest.Budget{Scope: e.scope("workspace:prod/agent:capped"), Allocated: 500,
		Caps: `{"max_tokens":300,"tool_allowlist":["search"],"cooldown_ms":5}`})
	cr := e.mustReserve("kc", 1, withSubject(&cyclesv1.Subject{Workspace: "prod", Agent: "capped"}))
	if cr.GetDecision() != cyclesv1.Decision_DECISION_ALLOW_WITH_CAPS || cr.GetCaps().GetMaxTokens() != 300 ||
		cr.GetCaps().GetCooldownMs() != 5 || len(cr.GetCaps().GetToolAllowlist()) != 1 {
		t.Fatalf("caps = %v", cr)
	}

	// Dry run: no reservation, no expiry, current balances.
	d, err := e.reserve("k2", 100, func(q *cyclesv1.CreateReservationRequest) { q.DryRun = true })
	if err != nil {
		t.Fatal(err)
	}
	if d.GetReservationId() != "" || d.GetExpiresAtMs() != 0 || d.RemainingTtlMs != nil || d.GetDecision() != cyclesv1.Decision_DECISION_ALLOW ||
		d.GetBalances()[1].GetRemaining().GetAmount() != 399 || d.GetReserved().GetAmount() != 100 {
		t.Fatalf("dry run = %v", d)
	}
	if st := e.state("workspace:prod"); st.Reserved.Int64() != 101 {
		t.Fatalf("a dry run reserved: %s", st)
	}
	// Dry-run DENY carries the reason and no balances.
	d, err = e.reserve("k3", 5000, func(q *cyclesv1.CreateReservationRequest) { q.DryRun = true })
	if err != nil || d.GetDecision() != cyclesv1.Decision_DECISION_DENY || d.GetReasonCode() != "BUDGET_EXCEEDED" || len(d.GetBalances()) != 0 {
		t.Fatalf("dry deny = %v %v", d, err)
	}
}

// Every success is replayed from its stored snapshot: proto.Equal and
// byte-identical deterministic encodings (reserve/extend: all but the
// recomputed remaining_ttl_ms). Replays count as replays, not as new effects.
func TestReplaysAreByteIdentical(t *testing.T) {
	e := newEnv(t)
	e.budget(ledgertest.Budget{Scope: e.scope(""), Allocated: 100_000, Caps: `{"max_tokens":7}`})
	e.budget(ledgertest.Budget{Scope: e.scope("workspace:prod"), Allocated: 50_000, OverdraftLimit: 10_000, Caps: `{"max_tokens":9,"tool_allowlist":["a","b"]}`})
	twice := func(name string, f func() (proto.Message, error), clear func(proto.Message)) {
		t.Helper()
		a, err := f()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		b, err := f()
		if err != nil {
			t.Fatalf("%s replay: %v", name, err)
		}
		if clear != nil {
			clear(a)
			clear(b)
		}
		sameBytes(t, a, b)
	}
	clearTTL := func(m proto.Message) { m.(*cyclesv1.CreateReservationResponse).RemainingTtlMs = nil }
	var rid, rid2 string
	twice("reserve", func() (proto.Message, error) {
		r, err := e.reserve("rk", 1000, withPolicy(cyclesv1.CommitOveragePolicy_COMMIT_OVERAGE_POLICY_ALLOW_WITH_OVERDRAFT))
		if r != nil {
			rid = r.ReservationId
		}
		return r, err
	}, clearTTL)
	twice("dry run allow", func() (proto.Message, error) {
		return e.reserve("dk", 10, func(q *cyclesv1.CreateReservationRequest) { q.DryRun = true })
	}, nil)
	twice("dry run deny", func() (proto.Message, error) {
		return e.reserve("dk2", 1_000_000, func(q *cyclesv1.CreateReservationRequest) { q.DryRun = true })
	}, nil)
	twice("decide", func() (proto.Message, error) {
		return e.l.Decide(ctx, e.tenant, &cyclesv1.DecideRequest{IdempotencyKey: "de", Subject: &cyclesv1.Subject{Workspace: "prod"}, Action: action, Estimate: tokens(5)})
	}, nil)
	twice("extend", func() (proto.Message, error) {
		return e.l.Extend(ctx, e.tenant, &cyclesv1.ExtendReservationRequest{ReservationId: rid, IdempotencyKey: "x", ExtendByMs: 1000})
	}, func(m proto.Message) { m.(*cyclesv1.ExtendReservationResponse).RemainingTtlMs = 0 })
	twice("commit with overdraft", func() (proto.Message, error) {
		return e.commit(rid, "c", 55_000)
	}, nil)
	twice("release", func() (proto.Message, error) {
		r := e.mustReserve("rk2", 10, withSubject(&cyclesv1.Subject{Workspace: "other"}))
		if rid2 == "" {
			rid2 = r.ReservationId
		}
		return e.release(rid2, "rel")
	}, nil)
	twice("event", func() (proto.Message, error) {
		return e.l.CreateEvent(ctx, e.tenant, &cyclesv1.CreateEventRequest{IdempotencyKey: "ev", Subject: &cyclesv1.Subject{Workspace: "prod"},
			Action: action, Actual: tokens(60_000), Metadata: mustStruct(t, map[string]any{"run": "r1"})})
	}, nil)
	for _, op := range []string{"reserve", "dry_run", "decide", "extend", "commit", "release", "event"} {
		if n := e.m.Sum(t, "cycles.idempotency.replays", attribute.String("operation", op)); n < 1 {
			t.Errorf("replays{%s} = %d", op, n)
		}
	}
	if n := e.m.Sum(t, "cycles.reservations.created"); n != 2 {
		t.Errorf("created = %d, want 2 (replays create nothing)", n)
	}
}

func mustStruct(t *testing.T, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The payload identity documented in hash.go.
func TestIdempotencyCanonicalPayload(t *testing.T) {
	e := newFundedEnv(t, 100_000)
	base := func() *cyclesv1.CreateReservationRequest {
		return reserveReq("same", &cyclesv1.Subject{Workspace: "prod", Dimensions: map[string]string{"a": "1", "b": "2", "c": "3"}}, 10)
	}
	first, err := e.l.Reserve(ctx, e.tenant, base())
	if err != nil {
		t.Fatal(err)
	}
	equivalent := map[string]func(*cyclesv1.CreateReservationRequest){
		"explicit effective tenant": func(q *cyclesv1.CreateReservationRequest) { q.Subject.Tenant = e.tenant },
		"explicit default grace":    func(q *cyclesv1.CreateReservationRequest) { g := int64(5000); q.GracePeriodMs = &g },
	}
	for name, mut := range equivalent {
		q := base()
		mut(q)
		r, err := e.l.Reserve(ctx, e.tenant, q)
		if err != nil || r.GetReservationId() != first.GetReservationId() {
			t.Fatalf("%s: want a replay, got %v %v", name, r, err)
		}
	}
	different := map[string]func(*cyclesv1.CreateReservationRequest){
		"estimate": func(q *cyclesv1.CreateReservationRequest) { q.Estimate.Amount = 11 },
		"explicit ttl (tenant default may change)": func(q *cyclesv1.CreateReservationRequest) { v := int64(60000); q.TtlMs = &v },
		"explicit policy":                          withPolicy(cyclesv1.CommitOveragePolicy_COMMIT_OVERAGE_POLICY_ALLOW_IF_AVAILABLE),
		"dimension value":                          func(q *cyclesv1.CreateReservationRequest) { q.Subject.Dimensions["a"] = "9" },
		"dry_run":                                  func(q *cyclesv1.CreateReservationRequest) { q.DryRun = true },
		"metadata":                                 func(q *cyclesv1.CreateReservationRequest) { q.Metadata = mustStruct(t, map[string]any{"x": 1}) },
	}
	for name, mut := range different {
		q := base()
		mut(q)
		_, err := e.l.Reserve(ctx, e.tenant, q)
		if !apierr.HasCode(err, apierr.IdempotencyMismatch) {
			t.Fatalf("%s: %v, want IDEMPOTENCY_MISMATCH", name, err)
		}
	}
	if _, err := e.l.Reserve(ctx, e.tenant, reserveReq("other", &cyclesv1.Subject{Tenant: "someone-else"}, 1)); !apierr.HasCode(err, apierr.Forbidden) {
		t.Fatalf("foreign subject.tenant: %v", err)
	}
}

// Each user-visible effect moves its counter.
func TestCounters(t *testing.T) {
	e := newEnv(t)
	e.budget(ledgertest.Budget{Scope: e.scope(""), Allocated: 1000, OverdraftLimit: 1000})
	a := e.mustReserve("a", 100, withPolicy(cyclesv1.CommitOveragePolicy_COMMIT_OVERAGE_POLICY_ALLOW_WITH_OVERDRAFT))
	b := e.mustReserve("b", 100)
	c := e.mustReserve("c", 100)
	if _, err := e.l.Extend(ctx, e.tenant, &cyclesv1.ExtendReservationRequest{ReservationId: c.ReservationId, IdempotencyKey: "x", ExtendByMs: 10}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.commit(a.ReservationId, "ca", 1000); err != nil { // Δ 900, remaining 700: debt 200
		t.Fatal(err)
	}
	if _, err := e.release(b.ReservationId, "rb"); err != nil {
		t.Fatal(err)
	}
	_, err := e.reserve("big", 1_000_000)
	wantCode(t, err, apierr.BudgetExceeded)
	if _, err := e.reserve("dry", 1_000_000, func(q *cyclesv1.CreateReservationRequest) { q.DryRun = true }); err != nil {
		t.Fatal(err)
	}
	if _, err := e.l.Decide(ctx, e.tenant, &cyclesv1.DecideRequest{IdempotencyKey: "d", Subject: &cyclesv1.Subject{Workspace: "prod"}, Action: action, Estimate: tokens(1)}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.l.CreateEvent(ctx, e.tenant, &cyclesv1.CreateEventRequest{IdempotencyKey: "e", Subject: &cyclesv1.Subject{Workspace: "prod"}, Action: action, Actual: tokens(10),
		OveragePolicy: cyclesv1.CommitOveragePolicy_COMMIT_OVERAGE_POLICY_ALLOW_WITH_OVERDRAFT}); err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name  string
		attrs []attribute.KeyValue
		want  int64
	}{
		{"cycles.reservations.created", nil, 3},
		{"cycles.reservations.committed", nil, 1},
		{"cycles.reservations.released", []attribute.KeyValue{attribute.String("reason", "client")}, 1},
		{"cycles.reservations.extended", nil, 1},
		{"cycles.reservations.denied", []attribute.KeyValue{attribute.String("operation", "reserve"), attribute.String("reason", "BUDGET_EXCEEDED")}, 1},
		{"cycles.reservations.denied", []attribute.KeyValue{attribute.String("operation", "dry_run"), attribute.String("reason", "BUDGET_EXCEEDED")}, 1},
		{"cycles.reservations.denied", []attribute.KeyValue{attribute.String("operation", "decide"), attribute.String("reason", "BUDGET_EXCEEDED")}, 1},
		{"cycles.decisions", []attribute.KeyValue{attribute.String("operation", "decide"), attribute.String("decision", "DENY")}, 1},
		{"cycles.decisions", []attribute.KeyValue{attribute.String("operation", "dry_run"), attribute.String("decision", "DENY")}, 1},
		{"cycles.commit.overages", nil, 1},
		{"cycles.debt.incurred", []attribute.KeyValue{attribute.String("unit", "TOKENS")}, 200 + 10},
		{"cycles.events.created", nil, 1},
		{"cycles.ledger.refusals", []attribute.KeyValue{attribute.String("operation", "reserve"), attribute.String("code", "BUDGET_EXCEEDED")}, 1},
	}
	for _, c := range checks {
		if got := e.m.Sum(t, c.name, c.attrs...); got != c.want {
			t.Errorf("%s%v = %d, want %d", c.name, c.attrs, got, c.want)
		}
	}
}

func TestGetReservation(t *testing.T) {
	e := newFundedEnv(t, 1000)
	subj := &cyclesv1.Subject{Workspace: "Prod", Dimensions: map[string]string{"run_id": "r-7"}}
	r := e.mustReserve("k", 100, withSubject(subj), func(q *cyclesv1.CreateReservationRequest) {
		q.Metadata = mustStruct(t, map[string]any{"trace": "abc"})
	})
	got, err := e.l.Get(ctx, e.tenant, &cyclesv1.GetReservationRequest{ReservationId: r.ReservationId})
	if err != nil {
		t.Fatal(err)
	}
	res := got.GetReservation()
	if res.GetStatus() != cyclesv1.ReservationStatus_RESERVATION_STATUS_ACTIVE || res.GetIdempotencyKey() != "k" ||
		res.GetSubject().GetWorkspace() != "Prod" || res.GetSubject().GetTenant() != e.tenant || res.GetSubject().GetDimensions()["run_id"] != "r-7" ||
		res.GetAction().GetName() != action.GetName() || res.GetReserved().GetAmount() != 100 ||
		res.GetExpiresAtMs() != r.GetExpiresAtMs() || res.GetCreatedAtMs() != r.GetExpiresAtMs()-60000 ||
		res.FinalizedAtMs != nil || res.GetMetadata().GetFields()["trace"].GetStringValue() != "abc" ||
		len(res.GetBudgetedScopes()) != 1 || res.GetBudgetedScopes()[0] != e.scope("") || len(res.GetAffectedScopes()) != 2 ||
		res.GetMaxExtensions() != 10 || res.GetGracePeriodMs() != 5000 {
		t.Fatalf("reservation = %v", res)
	}
	if _, err := e.l.Commit(ctx, e.tenant, &cyclesv1.CommitReservationRequest{ReservationId: r.ReservationId, IdempotencyKey: "c", Actual: tokens(80),
		Metadata: mustStruct(t, map[string]any{"done": true})}); err != nil {
		t.Fatal(err)
	}
	got, err = e.l.Get(ctx, e.tenant, &cyclesv1.GetReservationRequest{ReservationId: r.ReservationId})
	if err != nil {
		t.Fatal(err)
	}
	res = got.GetReservation()
	if res.GetStatus() != cyclesv1.ReservationStatus_RESERVATION_STATUS_COMMITTED || res.GetCommitted().GetAmount() != 80 ||
		res.FinalizedAtMs == nil || !res.GetCommittedMetadata().GetFields()["done"].GetBoolValue() {
		t.Fatalf("committed reservation = %v", res)
	}
	_, err = e.l.Get(ctx, e.tenant, &cyclesv1.GetReservationRequest{ReservationId: "r_" + e.tenant + "_00000000000000000000000000000000"})
	wantCode(t, err, apierr.NotFound)
	// Another tenant's id is not visible at all (no existence oracle).
	_, err = e.l.Get(ctx, ledgertest.NewTenantID(t), &cyclesv1.GetReservationRequest{ReservationId: r.ReservationId})
	wantCode(t, err, apierr.NotFound)
	_, err = e.l.Commit(ctx, ledgertest.NewTenantID(t), &cyclesv1.CommitReservationRequest{ReservationId: r.ReservationId, IdempotencyKey: "c", Actual: tokens(1)})
	wantCode(t, err, apierr.NotFound)
	// EXPIRED is RESERVATION_EXPIRED.
	x := e.mustReserve("x", 10)
	e.c.HSet(ctx, "cy:{t:"+e.tenant+"}:r:"+x.ReservationId, "state", "EXPIRED")
	e.c.ZRem(ctx, "cy:{t:"+e.tenant+"}:r:deadline", x.ReservationId)
	ledgertest.AddToBalance(t, e.c, "cy:{t:"+e.tenant+"}:b:"+e.scope("")+":TOKENS", map[string]int64{"reserved": -10, "remaining": 10})
	_, err = e.l.Get(ctx, e.tenant, &cyclesv1.GetReservationRequest{ReservationId: x.ReservationId})
	wantCode(t, err, apierr.ReservationExpired)
}

// ReleaseForTenantClose drains a CLOSED tenant in bounded batches through
// the release arithmetic; every hold comes back exactly once.
func TestReleaseForTenantClose(t *testing.T) {
	e := newEnv(t)
	ledgertest.SeedTenant(t, e.c, e.tenant, ledgertest.Tenant{})
	e.budget(ledgertest.Budget{Scope: e.scope(""), Allocated: 1000})
	e.budget(ledgertest.Budget{Scope: e.scope("workspace:prod"), Allocated: 1000})
	var ids []string
	for i := 0; i < 5; i++ {
		ids = append(ids, e.mustReserve("k"+itoa(int64(i)), 100).ReservationId)
	}
	committed := ids[0]
	if _, err := e.commit(committed, "c", 50); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.l.ReleaseForTenantClose(ctx, e.tenant, 2); !apierr.HasCode(err, apierr.InvalidState) {
		t.Fatalf("release before the tenant is CLOSED: %v", err)
	}
	ledgertest.SetTenantStatus(t, e.c, e.tenant, "CLOSED")
	total, calls := 0, 0
	for more := true; more; calls++ {
		n, m, err := e.l.ReleaseForTenantClose(ctx, e.tenant, 2)
		if err != nil {
			t.Fatal(err)
		}
		if n > 2 {
			t.Fatalf("released %d in a batch of 2", n)
		}
		total, more = total+n, m
		ledgertest.CheckInvariants(t, e.c, e.tenant)
	}
	if total != 4 || calls != 2 {
		t.Fatalf("released %d in %d calls, want 4 in 2", total, calls)
	}
	for _, p := range []string{"", "workspace:prod"} {
		st := ledgertest.ReadBudget(t, e.c, e.tenant, e.scope(p), "TOKENS")
		if st.Reserved.Sign() != 0 || st.Remaining.Int64() != 950 {
			t.Fatalf("%s after close: %s", p, st)
		}
	}
	got, _ := e.l.Get(ctx, e.tenant, &cyclesv1.GetReservationRequest{ReservationId: ids[1]})
	if got.GetReservation().GetStatus() != cyclesv1.ReservationStatus_RESERVATION_STATUS_RELEASED {
		t.Fatalf("status = %v", got.GetReservation().GetStatus())
	}
	if n, more, err := e.l.ReleaseForTenantClose(ctx, e.tenant, 2); n != 0 || more || err != nil {
		t.Fatalf("second drain: %d %v %v", n, more, err)
	}
	n := 0
	for _, typ := range ledgertest.EventTypes(t, e.c, e.tenant) {
		if typ == "reservation.released_via_tenant_cascade" {
			n++
		}
	}
	if n != 4 {
		t.Fatalf("cascade events = %d", n)
	}
	if got := e.m.Sum(t, "cycles.reservations.released", attribute.String("reason", "tenant_closed")); got != 4 {
		t.Fatalf("released{tenant_closed} = %d", got)
	}
	_, err := e.release(ids[1], "late")
	wantCode(t, err, apierr.TenantClosed)
}
