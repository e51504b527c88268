package opsapi_test

import (
	"context"
	"encoding/json"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/api/eventsapi"
	"github.com/cyclesgo/cycles-go/internal/api/opsapi"
	"github.com/cyclesgo/cycles-go/internal/api/runtimeapi"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/ledger"
	"github.com/cyclesgo/cycles-go/internal/ledgerops"
	"github.com/cyclesgo/cycles-go/internal/script"
	"github.com/cyclesgo/cycles-go/internal/server"
	"github.com/cyclesgo/cycles-go/internal/sweeper"
	"github.com/cyclesgo/cycles-go/internal/telemetry/telemetrytest"
	"github.com/cyclesgo/cycles-go/test/grpctest"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
	"github.com/cyclesgo/cycles-go/test/redistest"
	"github.com/cyclesgo/cycles-go/test/scripttest"
)

// env is one cyclesd behind the production interceptor chain: the runtime
// (to make real reservations) and OpsService, on the shared backend (a
// 3-master Cluster when CYCLES_TEST_REDIS=cluster).
type env struct {
	t      *testing.T
	c      redis.UniversalClient
	ex     *script.Executor
	rt     cyclesv1.RuntimeServiceClient
	ops    cyclesv1.OpsServiceClient
	svc    *ledgerops.Service
	mr     *telemetrytest.Reader
	tenant string
}

func newEnv(t *testing.T) *env { return newEnvOn(t, redistest.SharedClient(t)) }

func newEnvOn(t *testing.T, c redis.UniversalClient) *env {
	return newEnvWith(t, c, ledgerops.Options{AuditRate: 1000})
}

func newEnvWith(t *testing.T, c redis.UniversalClient, opts ledgerops.Options) *env {
	return newEnvFor(t, redistest.BackendOn(t, c), opts)
}

// newEnvFor builds the services on one leg of redistest.Backends, their
// scripts sent the way production sends them on that backend.
func newEnvFor(t *testing.T, be redistest.Backend, opts ledgerops.Options) *env {
	t.Helper()
	c := be.Client
	ex := scripttest.New(t, be)
	mr := telemetrytest.New()
	sw := sweeper.New(ex, sweeper.Options{MeterProvider: mr.Provider})
	opts.MeterProvider = mr.Provider
	svc := ledgerops.New(ex, opts)
	conn := grpctest.Start(t, server.Services{
		Runtime: runtimeapi.New(ledger.New(ex, ledger.Options{})),
		Ops:     opsapi.New(sw, svc),
	})
	e := &env{t: t, c: c, ex: ex, rt: cyclesv1.NewRuntimeServiceClient(conn), ops: cyclesv1.NewOpsServiceClient(conn),
		svc: svc, mr: mr, tenant: ledgertest.NewTenantID(t)}
	ledgertest.SeedTenant(t, c, e.tenant, ledgertest.Tenant{})
	return e
}

func admin() context.Context { return grpctest.AsAdmin(context.Background()) }

func (e *env) ws(name string) string { return "tenant:" + e.tenant + "/workspace:" + name }

// budget seeds a 1,000-token budget on workspace name.
func (e *env) budget(name string) {
	ledgertest.SeedBudget(e.t, e.c, e.tenant, ledgertest.Budget{Scope: e.ws(name), Unit: "TOKENS", Allocated: 1000})
}

// reserve holds est tokens on workspace name through the runtime API.
func (e *env) reserve(name string, est int64) string {
	e.t.Helper()
	r, err := e.rt.CreateReservation(grpctest.AsTenant(context.Background(), e.tenant), &cyclesv1.CreateReservationRequest{
		IdempotencyKey: "k-" + name + "-" + strconv.FormatInt(est, 10), Subject: &cyclesv1.Subject{Workspace: name},
		Action: &cyclesv1.Action{Kind: "llm.completion", Name: "m"}, Estimate: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: est}})
	if err != nil {
		e.t.Fatalf("reserve on %s: %v", name, err)
	}
	return r.GetReservationId()
}

// untouchable renders allocated, spent and debt of every budget of the
// tenant: the fields a repair must never write.
func (e *env) untouchable() string {
	e.t.Helper()
	ctx := context.Background()
	tk := keys.Tenant(e.tenant)
	var b strings.Builder
	for _, m := range e.c.ZRange(ctx, tk.Budgets(), 0, -1).Val() {
		i := strings.LastIndexByte(m, '|')
		f := ledgertest.BalanceFields(e.c.HGetAll(ctx, tk.Budget(m[:i], m[i+1:])).Val())
		b.WriteString(m)
		for _, x := range []string{f["allocated"], f["spent"], f["debt"]} {
			b.WriteString(" ")
			b.WriteString(x)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func (e *env) audit() *cyclesv1.AuditTenantResponse {
	e.t.Helper()
	r, err := e.ops.AuditTenant(admin(), &cyclesv1.AuditTenantRequest{TenantId: e.tenant})
	if err != nil {
		e.t.Fatalf("audit: %v", err)
	}
	return r
}

func (e *env) redis(args ...any) {
	e.t.Helper()
	if err := e.c.Do(context.Background(), args...).Err(); err != nil {
		e.t.Fatalf("%v: %v", args, err)
	}
}

func (e *env) field(key, f string) string {
	return e.c.HGet(context.Background(), key, f).Val()
}

// sig renders a discrepancy or change as "KIND id-or-scope".
func sig(kind, id, scope string) string {
	if id != "" {
		return kind + " " + id
	}
	return kind + " " + scope
}

func discrepancies(ds []*cyclesv1.AuditDiscrepancy) []string {
	out := []string{}
	for _, d := range ds {
		out = append(out, sig(d.GetKind(), d.GetReservationId(), d.GetScopePath()))
	}
	sort.Strings(out)
	return out
}

func changes(cs []*cyclesv1.RepairChange) []string {
	out := []string{}
	for _, c := range cs {
		out = append(out, sig(c.GetKind(), c.GetReservationId(), c.GetScopePath())+" "+c.GetAction())
	}
	sort.Strings(out)
	return out
}

func sorted(s ...string) []string {
	sort.Strings(s)
	return s
}

func equal(a, b []string) bool { return strings.Join(a, "\n") == strings.Join(b, "\n") }

// reasonOf is the ErrorInfo reason of a gRPC error ("" when none).
func reasonOf(err error) string {
	st, _ := status.FromError(err)
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}

func refusal(t *testing.T, err error, reason apierr.Code) {
	t.Helper()
	if err == nil || reasonOf(err) != string(reason) {
		t.Fatalf("err = %v, want %s", err, reason)
	}
}

// typedEvent converts a stored event the way the event service's edge does.
func typedEvent(t *testing.T, ev map[string]string) *cyclesv1.Event {
	t.Helper()
	data := &structpb.Struct{}
	if err := protojson.Unmarshal([]byte(ev["data"]), data); err != nil {
		t.Fatalf("event data %q: %v", ev["data"], err)
	}
	out := &cyclesv1.Event{EventType: ev["type"], Data: data}
	eventsapi.Typed(out)
	return out
}

func (e *env) eventsOf(typ string) []map[string]string {
	var out []map[string]string
	for _, ev := range ledgertest.Events(e.t, e.c, e.tenant) {
		if ev["type"] == typ {
			out = append(out, ev)
		}
	}
	return out
}

// The incidents the issue names, made in Redis the way they happen, then
// found, repaired and resolved through OpsService only.
// On every backend: the shared one (a Cluster under CYCLES_TEST_REDIS=cluster)
// and the embedded store of dev mode.
func TestIncidentsAuditRepairResolve(t *testing.T) {
	for _, be := range redistest.Backends(t) {
		t.Run(be.Name, func(t *testing.T) { incidents(t, newEnvFor(t, be, ledgerops.Options{AuditRate: 1000})) })
	}
}

func incidents(t *testing.T, e *env) {
	ctx := context.Background()
	tk := keys.Tenant(e.tenant)
	for _, w := range []string{"w1", "w2", "w3", "w4", "w5", "ok"} {
		e.budget(w)
	}
	r1, r2, r3 := e.reserve("w1", 10), e.reserve("w2", 10), e.reserve("w3", 10)
	e.reserve("w4", 10)
	e.reserve("w5", 10)
	e.reserve("ok", 7)
	if _, err := e.rt.CommitReservation(grpctest.AsTenant(ctx, e.tenant), &cyclesv1.CommitReservationRequest{
		ReservationId: r3, IdempotencyKey: "c3", Actual: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 4}}); err != nil {
		t.Fatal(err)
	}
	if v := ledgertest.Violations(ctx, e.c, e.tenant); len(v) > 0 {
		t.Fatalf("sound before the incidents: %v", v)
	}
	if got := e.audit(); len(got.GetDiscrepancies()) != 0 || got.GetStats().GetActive() != 5 || got.GetStats().GetBudgets() != 6 {
		t.Fatalf("clean audit = %v", got)
	}

	// 1. A mangled estimate (and its deadline past, so the sweeper meets it).
	past := time.Now().UnixMilli() - 60_000
	e.redis("HSET", tk.Reservation(r1), "estimate", "1O", "expires_at", strconv.FormatInt(past, 10), "grace_ms", "0")
	e.redis("ZADD", tk.Deadlines(), past, r1)
	// 2. A deleted record whose index entry is left.
	e.redis("DEL", tk.Reservation(r2))
	// 3. A finalized record re-indexed.
	e.redis("ZADD", tk.Deadlines(), time.Now().UnixMilli()+60_000, r3)
	// 4. A reserved aggregate off by one.
	ledgertest.AddToBalance(t, e.c, tk.Budget(e.ws("w4"), "TOKENS"), map[string]int64{"reserved": 1})
	// 5. A budget balance missing an amount.
	ledgertest.PatchBalance(t, e.c, tk.Budget(e.ws("w5"), "TOKENS"), map[string]string{"reserved": ""})

	found := e.audit()
	want := sorted(
		"INVALID_RECORD "+r1,
		"INDEX_ORPHAN "+r2, "RESERVED_MISMATCH "+e.ws("w2"),
		"INDEX_FINALIZED "+r3,
		"RESERVED_MISMATCH "+e.ws("w4"), "BALANCE_IDENTITY "+e.ws("w4"),
		"BUDGET_FIELD_INVALID "+e.ws("w5"),
	)
	if got := discrepancies(found.GetDiscrepancies()); !equal(got, want) {
		t.Fatalf("audit found\n%v\nwant\n%v", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, d := range found.GetDiscrepancies() {
		switch {
		case d.GetKind() == "INVALID_RECORD" && (d.GetEvidence()["reason"] != "INVALID_ESTIMATE" || d.GetEvidence()["estimate"] != "1O" || d.GetRepairable()):
			t.Errorf("mangled estimate evidence %v", d)
		case d.GetKind() == "RESERVED_MISMATCH" && d.GetScopePath() == e.ws("w4") &&
			(d.GetEvidence()["reserved"] != "11" || d.GetEvidence()["sum_of_active_holds"] != "10"):
			t.Errorf("off-by-one evidence %v", d)
		case d.GetKind() == "BUDGET_FIELD_INVALID" && d.GetEvidence()["field"] != "reserved":
			t.Errorf("missing field evidence %v", d)
		}
	}

	// The dry run (apply unset) lists exactly the safe fixes and writes nothing.
	before := ledgertest.Dump(t, e.c, e.tenant)
	dry, err := e.ops.RepairTenant(admin(), &cyclesv1.RepairTenantRequest{TenantId: e.tenant})
	if err != nil {
		t.Fatal(err)
	}
	wantFix := sorted(
		"INDEX_ORPHAN "+r2+" ZREM deadline index",
		"INDEX_FINALIZED "+r3+" ZREM deadline index",
		"RESERVED_MISMATCH "+e.ws("w2")+" HSET reserved, remaining",
		"RESERVED_MISMATCH "+e.ws("w4")+" HSET reserved",
		"BUDGET_FIELD_INVALID "+e.ws("w5")+" HSET reserved",
	)
	if got := changes(dry.GetChanges()); dry.GetApplied() || !equal(got, wantFix) {
		t.Fatalf("dry run (applied=%v)\n%v\nwant\n%v", dry.GetApplied(), strings.Join(got, "\n"), strings.Join(wantFix, "\n"))
	}
	if got := discrepancies(dry.GetUnrepaired()); !equal(got, []string{"INVALID_RECORD " + r1}) {
		t.Fatalf("unrepaired %v", got)
	}
	if after := ledgertest.Dump(t, e.c, e.tenant); after != before {
		t.Fatalf("the dry run wrote:\n%s\nvs\n%s", before, after)
	}

	// Apply without a key is refused before anything runs.
	if _, err := e.ops.RepairTenant(admin(), &cyclesv1.RepairTenantRequest{TenantId: e.tenant, Apply: true}); reasonOf(err) != string(apierr.InvalidRequest) {
		t.Fatalf("apply without a key: %v", err)
	}
	// Apply: the same changes, in one step; a retry replays.
	untouchable := e.untouchable()
	req := &cyclesv1.RepairTenantRequest{TenantId: e.tenant, Apply: true, IdempotencyKey: "fix-1"}
	applied, err := e.ops.RepairTenant(admin(), req)
	if err != nil {
		t.Fatal(err)
	}
	if got := changes(applied.GetChanges()); !applied.GetApplied() || applied.GetReplay() || !equal(got, wantFix) {
		t.Fatalf("apply %v", applied)
	}
	again, err := e.ops.RepairTenant(admin(), req)
	if err != nil || !again.GetReplay() || !equal(changes(again.GetChanges()), wantFix) {
		t.Fatalf("replay %v %v", again, err)
	}
	if got := e.untouchable(); got != untouchable {
		t.Fatalf("repair wrote allocated, spent or debt:\n%s\nvs\n%s", untouchable, got)
	}
	repaired := e.eventsOf("tenant.ledger_repaired")
	if n := len(repaired); n != 1 {
		t.Fatalf("%d ledger_repaired events, want 1", n)
	}
	if ev := typedEvent(t, repaired[0]); ev.GetType() != cyclesv1.EventType_EVENT_TYPE_TENANT_LEDGER_REPAIRED ||
		int(ev.GetLedgerRepaired().GetChanges()) != len(wantFix) {
		t.Fatalf("typed ledger_repaired %v, want %d changes", ev, len(wantFix))
	}
	w2 := ledgertest.ReadBudget(t, e.c, e.tenant, e.ws("w2"), "TOKENS")
	if w2.Reserved.Int64() != 0 || w2.Remaining.Int64() != 1000 || w2.Spent.Int64() != 0 {
		t.Fatalf("w2 after repair %s: the lost hold goes back to remaining", w2)
	}
	for _, w := range []string{"w4", "w5"} {
		if b := ledgertest.ReadBudget(t, e.c, e.tenant, e.ws(w), "TOKENS"); b.Reserved.Int64() != 10 || b.Remaining.Int64() != 990 {
			t.Fatalf("%s after repair %s", w, b)
		}
	}
	if got := discrepancies(e.audit().GetDiscrepancies()); !equal(got, []string{"INVALID_RECORD " + r1}) {
		t.Fatalf("second audit %v", got)
	}

	// The sweeper quarantines the mangled record; resolve it by releasing
	// the hold the operator knows it had.
	sw, err := e.ops.SweepTenant(admin(), &cyclesv1.SweepTenantRequest{TenantId: e.tenant})
	if err != nil || sw.GetCounts().GetQuarantined() != 1 {
		t.Fatalf("sweep tenant %v %v", sw, err)
	}
	list, err := e.ops.ListQuarantined(admin(), &cyclesv1.ListQuarantinedRequest{TenantId: e.tenant})
	if err != nil || len(list.GetReservations()) != 1 {
		t.Fatalf("list %v %v", list, err)
	}
	q := list.GetReservations()[0]
	if q.GetReservationId() != r1 || q.GetReason() != "INVALID_ESTIMATE" || q.GetFields()["estimate"] != "1O" || q.GetQuarantinedAtMs() == 0 {
		t.Fatalf("quarantined row %v", q)
	}
	// The record's fields as an operator reads them, whatever its stored
	// layout (docs/design.md#reservation-records): its id and the budgeted
	// scopes as a JSON array, no balance rows.
	var budgeted []string
	if err := json.Unmarshal([]byte(q.GetFields()["budgeted"]), &budgeted); err != nil || len(budgeted) != 1 || budgeted[0] != strings.ToLower(e.ws("W1")) ||
		q.GetFields()["id"] != r1 || q.GetFields()["rb1"] != "" || q.GetFields()["rb2"] != "" {
		t.Fatalf("quarantined fields %v", q.GetFields())
	}
	if got := discrepancies(e.audit().GetDiscrepancies()); !equal(got, []string{"QUARANTINED " + r1}) {
		t.Fatalf("audit after quarantine %v", got)
	}
	resolve := &cyclesv1.ResolveQuarantinedRequest{TenantId: e.tenant, ReservationId: r1, IdempotencyKey: "res-1", Reason: "estimate was 10",
		Outcome: &cyclesv1.ResolveQuarantinedRequest_Release{Release: &cyclesv1.ReleaseHold{
			Amounts: []*cyclesv1.ScopeAmount{{ScopePath: e.ws("W1"), Amount: 10}}}}}
	res, err := e.ops.ResolveQuarantined(admin(), resolve)
	if err != nil {
		t.Fatal(err)
	}
	if res.GetOutcome() != "RELEASED" || res.GetReplay() || len(res.GetBudgets()) != 1 ||
		res.GetBudgets()[0].GetFields()["reserved"] != "0" || res.GetBudgets()[0].GetFields()["remaining"] != "1000" {
		t.Fatalf("resolve %v", res)
	}
	if again, err := e.ops.ResolveQuarantined(admin(), resolve); err != nil || !again.GetReplay() || again.GetOutcome() != "RELEASED" {
		t.Fatalf("resolve replay %v %v", again, err)
	}
	other := &cyclesv1.ResolveQuarantinedRequest{TenantId: e.tenant, ReservationId: r1, IdempotencyKey: "res-1",
		Outcome: &cyclesv1.ResolveQuarantinedRequest_ExpireWithoutRefund{ExpireWithoutRefund: &cyclesv1.ExpireWithoutRefund{}}}
	_, err = e.ops.ResolveQuarantined(admin(), other)
	refusal(t, err, apierr.IdempotencyMismatch)
	evs := e.eventsOf("reservation.quarantine_resolved")
	if len(evs) != 1 || evs[0]["actor"] != "admin" || !strings.Contains(evs[0]["data"], `"outcome":"RELEASED"`) {
		t.Fatalf("resolve events %v", evs)
	}
	if ev := typedEvent(t, evs[0]); ev.GetType() != cyclesv1.EventType_EVENT_TYPE_RESERVATION_QUARANTINE_RESOLVED ||
		ev.GetQuarantineResolved().GetOutcome() != "RELEASED" || ev.GetQuarantineResolved().GetReservationId() == "" {
		t.Fatalf("typed quarantine_resolved %v", ev)
	}
	if st := e.field(tk.Reservation(r1), "state"); st != "RELEASED" {
		t.Fatalf("r1 state %s", st)
	}

	if got := e.audit(); len(got.GetDiscrepancies()) != 0 {
		t.Fatalf("final audit %v", discrepancies(got.GetDiscrepancies()))
	}
	if v := ledgertest.Violations(ctx, e.c, e.tenant); len(v) > 0 {
		t.Fatalf("the invariant checker disagrees: %v", v)
	}
	if got := e.mr.Sum(t, "cycles.ops.quarantine_resolved", attribute.String("outcome", "RELEASED")); got != 1 {
		t.Fatalf("resolved counter %d", got)
	}
}

// quarantined makes a quarantined reservation of est on a fresh workspace
// budget and returns its id and workspace.
func (e *env) quarantined(name string, est int64, incident func(id string)) string {
	e.t.Helper()
	e.budget(name)
	id := e.reserve(name, est)
	tk := keys.Tenant(e.tenant)
	past := time.Now().UnixMilli() - 60_000
	e.redis("HSET", tk.Reservation(id), "expires_at", strconv.FormatInt(past, 10), "grace_ms", "0")
	incident(id)
	e.redis("ZADD", tk.Deadlines(), past, id)
	sw, err := e.ops.SweepTenant(admin(), &cyclesv1.SweepTenantRequest{TenantId: e.tenant})
	if err != nil || sw.GetCounts().GetQuarantined() != 1 {
		e.t.Fatalf("sweep %v %v", sw, err)
	}
	return id
}

func TestResolveOutcomesAndRefusals(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	tk := keys.Tenant(e.tenant)

	// Requeue after correcting the estimate: the sweeper then expires it and
	// refunds exactly the corrected amount.
	rq := e.quarantined("rq", 25, func(id string) { e.redis("HSET", tk.Reservation(id), "estimate", "-25x") })
	_, err := e.ops.ResolveQuarantined(admin(), &cyclesv1.ResolveQuarantinedRequest{TenantId: e.tenant, ReservationId: rq, IdempotencyKey: "rq-bad",
		Outcome: &cyclesv1.ResolveQuarantinedRequest_Requeue{Requeue: &cyclesv1.Requeue{Estimate: ptr(int64(26))}}})
	refusal(t, err, apierr.InvalidRequest) // 26 > reserved 25 on the budget
	est := int64(25)
	res, err := e.ops.ResolveQuarantined(admin(), &cyclesv1.ResolveQuarantinedRequest{TenantId: e.tenant, ReservationId: rq, IdempotencyKey: "rq",
		Outcome: &cyclesv1.ResolveQuarantinedRequest_Requeue{Requeue: &cyclesv1.Requeue{Estimate: &est}}})
	if err != nil || res.GetOutcome() != "REQUEUED" {
		t.Fatalf("requeue %v %v", res, err)
	}
	if sw, err := e.ops.SweepTenant(admin(), &cyclesv1.SweepTenantRequest{TenantId: e.tenant}); err != nil || sw.GetCounts().GetExpired() != 1 {
		t.Fatalf("sweep after requeue %v %v", sw, err)
	}
	if b := ledgertest.ReadBudget(t, e.c, e.tenant, e.ws("rq"), "TOKENS"); b.Reserved.Sign() != 0 || b.Remaining.Int64() != 1000 {
		t.Fatalf("after requeue and sweep %s", b)
	}

	// Expire without a refund: for a hold the budget no longer carries
	// (reset after the reservation, so the sweeper saw RESERVED_UNDERFLOW).
	exID := e.quarantined("ex", 40, func(string) {
		ledgertest.PatchBalance(e.t, e.c, tk.Budget(e.ws("ex"), "TOKENS"), map[string]string{"reserved": "0", "remaining": "1000"})
	})
	if r := e.field(tk.Reservation(exID), "quarantine_reason"); r != "RESERVED_UNDERFLOW" {
		t.Fatalf("reason %s", r)
	}
	res, err = e.ops.ResolveQuarantined(admin(), &cyclesv1.ResolveQuarantinedRequest{TenantId: e.tenant, ReservationId: exID, IdempotencyKey: "ex",
		Outcome: &cyclesv1.ResolveQuarantinedRequest_ExpireWithoutRefund{ExpireWithoutRefund: &cyclesv1.ExpireWithoutRefund{}}})
	if err != nil || res.GetOutcome() != "EXPIRED" {
		t.Fatalf("expire %v %v", res, err)
	}
	if b := ledgertest.ReadBudget(t, e.c, e.tenant, e.ws("ex"), "TOKENS"); b.Reserved.Sign() != 0 || b.Remaining.Int64() != 1000 {
		t.Fatalf("expire touched the budget: %s", b)
	}

	// A record with an invalid state (INVALID_STATE) is listed and resolvable too.
	bad := e.quarantined("st", 5, func(id string) { e.redis("HSET", tk.Reservation(id), "state", "ACTIVEX") })
	if r := e.field(tk.Reservation(bad), "quarantine_reason"); r != "INVALID_STATE" {
		t.Fatalf("reason %s", r)
	}
	if got := discrepancies(e.audit().GetDiscrepancies()); !equal(got, []string{"QUARANTINED " + bad}) {
		t.Fatalf("audit of an INVALID_STATE quarantine %v", got)
	}
	if list, err := e.ops.ListQuarantined(admin(), &cyclesv1.ListQuarantinedRequest{TenantId: e.tenant}); err != nil ||
		len(list.GetReservations()) != 1 || list.GetReservations()[0].GetReason() != "INVALID_STATE" {
		t.Fatalf("list %v %v", list, err)
	}
	if res, err := e.ops.ResolveQuarantined(admin(), releaseReq(e, bad, e.ws("st"), 5)); err != nil || res.GetOutcome() != "RELEASED" {
		t.Fatalf("release of an INVALID_STATE record %v %v", res, err)
	}

	// Refusals change nothing.
	rel := e.quarantined("rel", 30, func(id string) { e.redis("HSET", tk.Reservation(id), "budgeted", "not json") })
	before := ledgertest.Dump(t, e.c, e.tenant)
	cases := []struct {
		name   string
		req    *cyclesv1.ResolveQuarantinedRequest
		reason apierr.Code
	}{
		{"amount above reserved", releaseReq(e, rel, e.ws("rel"), 31), apierr.InvalidRequest},
		{"budget that does not exist", releaseReq(e, rel, e.ws("nope"), 1), apierr.BudgetNotFound},
		{"not quarantined", releaseReq(e, rq, e.ws("rq"), 1), apierr.InvalidState},
		{"no such reservation", releaseReq(e, "res_missing", e.ws("rel"), 1), apierr.NotFound},
		{"negative amount", releaseReq(e, rel, e.ws("rel"), -1), apierr.InvalidRequest},
		{"scope of another tenant", releaseReq(e, rel, "tenant:other/workspace:rel", 1), apierr.InvalidRequest},
		{"no outcome", &cyclesv1.ResolveQuarantinedRequest{TenantId: e.tenant, ReservationId: rel, IdempotencyKey: "x"}, apierr.InvalidRequest},
	}
	for _, c := range cases {
		_, err := e.ops.ResolveQuarantined(admin(), c.req)
		if got := reasonOf(err); got != string(c.reason) {
			t.Errorf("%s: err %v, want %s", c.name, err, c.reason)
		}
	}
	if after := ledgertest.Dump(t, e.c, e.tenant); after != before {
		t.Fatalf("a refused resolution wrote")
	}
	// Released with the operator's amount: scopes unparseable, so any
	// budget of the unit may be named.
	if _, err := e.ops.ResolveQuarantined(admin(), releaseReq(e, rel, e.ws("rel"), 30)); err != nil {
		t.Fatal(err)
	}
	if got := e.audit(); len(got.GetDiscrepancies()) != 0 {
		t.Fatalf("audit after resolutions %v", discrepancies(got.GetDiscrepancies()))
	}
	if v := ledgertest.Violations(ctx, e.c, e.tenant); len(v) > 0 {
		t.Fatalf("invariants: %v", v)
	}
	if n := len(e.eventsOf("reservation.quarantine_resolved")); n != 4 {
		t.Fatalf("%d resolution events, want 4", n)
	}
}

func releaseReq(e *env, id, scope string, amount int64) *cyclesv1.ResolveQuarantinedRequest {
	return &cyclesv1.ResolveQuarantinedRequest{TenantId: e.tenant, ReservationId: id, IdempotencyKey: "rel-" + strconv.FormatInt(amount, 10),
		Outcome: &cyclesv1.ResolveQuarantinedRequest_Release{Release: &cyclesv1.ReleaseHold{
			Amounts: []*cyclesv1.ScopeAmount{{ScopePath: scope, Amount: amount}}}}}
}

func ptr[T any](v T) *T { return &v }
