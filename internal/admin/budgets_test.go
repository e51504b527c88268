package admin

import (
	"context"
	"encoding/base64"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
)

const (
	tokens  = cyclesv1.Unit_UNIT_TOKENS
	credits = cyclesv1.Unit_UNIT_CREDITS
)

// createBudget creates a budget of allocated in unit at path (relative to the tenant root).
func (e *env) createBudget(tenant, path string, unit cyclesv1.Unit, allocated int64) *cyclesv1.Budget {
	e.t.Helper()
	return mustCall(e.t, e.ctx, &cyclesv1.CreateBudgetRequest{TenantId: tenant, ScopePath: scopeOf(tenant, path), Unit: unit, Allocated: allocated}, e.svc.CreateBudget).GetBudget()
}

// scopeOf is "tenant:<tenant>" plus an optional "/..." suffix.
func scopeOf(tenant, path string) string {
	if path == "" {
		return "tenant:" + tenant
	}
	return "tenant:" + tenant + "/" + path
}

func TestCreateBudget(t *testing.T) {
	e := newEnv(t)
	id := e.createTenant()
	max := int64(1<<63 - 1)
	req := &cyclesv1.CreateBudgetRequest{
		TenantId: id, ScopePath: scopeOf(id, "workspace:Prod/agent:Bot"), Unit: tokens, Allocated: 1000, OverdraftLimit: 50,
		CommitOveragePolicy: cyclesv1.CommitOveragePolicy_COMMIT_OVERAGE_POLICY_REJECT,
		Caps:                &cyclesv1.Caps{MaxTokens: &max, ToolDenylist: []string{"rm"}},
		Metadata:            map[string]string{"owner": "ops"},
	}
	b := mustCall(t, e.ctx, req, e.svc.CreateBudget).GetBudget()
	sp := scopeOf(id, "workspace:prod/agent:bot")
	want := &cyclesv1.Budget{
		TenantId: id, ScopePath: sp, Unit: tokens, Allocated: 1000, Remaining: 1000, OverdraftLimit: 50,
		Status: cyclesv1.BudgetStatus_BUDGET_STATUS_ACTIVE, CommitOveragePolicy: cyclesv1.CommitOveragePolicy_COMMIT_OVERAGE_POLICY_REJECT,
		Caps: &cyclesv1.Caps{MaxTokens: &max, ToolDenylist: []string{"rm"}}, Metadata: map[string]string{"owner": "ops"},
		CreatedAtMs: b.GetCreatedAtMs(), UpdatedAtMs: b.GetCreatedAtMs(),
	}
	if b.GetCreatedAtMs() == 0 || !proto.Equal(b, want) {
		t.Fatalf("budget = %v\nwant     %v", b, want)
	}
	h := e.budgetHash(id, sp, "TOKENS")
	for k, v := range map[string]string{"scope_path": sp, "unit": "TOKENS", "allocated": "1000", "remaining": "1000", "reserved": "0",
		"spent": "0", "debt": "0", "overdraft_limit": "50", "is_over_limit": "false", "status": "ACTIVE",
		"caps": `{"max_tokens":9223372036854775807,"tool_denylist":["rm"]}`} {
		if h[k] != v {
			t.Fatalf("hash %s = %q, want %q", k, h[k], v)
		}
	}
	e.checkInvariant(id, sp, "TOKENS")
	members := e.rdb.ZRange(context.Background(), keys.Tenant(id).Budgets(), 0, -1).Val()
	if !reflect.DeepEqual(members, []string{keys.BudgetMember(sp, "TOKENS")}) {
		t.Fatalf("index = %v", members)
	}
	got := mustCall(t, e.ctx, &cyclesv1.GetBudgetRequest{TenantId: id, ScopePath: scopeOf(id, "workspace:PROD/agent:bot"), Unit: tokens}, e.svc.GetBudget).GetBudget()
	if !proto.Equal(got, b) {
		t.Fatalf("get = %v, want %v", got, b)
	}
	evs := e.events(id)
	last := evs[len(evs)-1]
	if last.Type != "budget.created" || last.Category != "budget" || last.Scope != sp || last.Data["operation"] != "CREATE" ||
		fmt.Sprint(last.Data["new_state"]) != "map[allocated:1000 debt:0 remaining:1000 reserved:0 spent:0 status:ACTIVE]" {
		t.Fatalf("event = %+v", last)
	}
	if n := e.metrics.Sum(t, "cycles.admin.budgets.created", attribute.String("unit", "TOKENS")); n != 1 {
		t.Fatalf("budgets.created = %d", n)
	}
	// Same scope, other unit: a different budget.
	e.createBudget(id, "workspace:prod/agent:bot", credits, 0)
}

func TestCreateBudgetRefusals(t *testing.T) {
	e := newEnv(t)
	id := e.createTenant()
	e.createBudget(id, "workspace:prod", tokens, 10)
	suspended := e.createTenant()
	mustCall(t, e.ctx, &cyclesv1.UpdateTenantRequest{TenantId: suspended, Status: cyclesv1.TenantStatus_TENANT_STATUS_SUSPENDED}, e.svc.UpdateTenant)
	closed := e.createTenant()
	mustCall(t, e.ctx, &cyclesv1.CloseTenantRequest{TenantId: closed}, e.svc.CloseTenant)
	unknown := newTenantID(t)
	neg := int64(-1)
	ok := func(mod func(*cyclesv1.CreateBudgetRequest)) *cyclesv1.CreateBudgetRequest {
		r := &cyclesv1.CreateBudgetRequest{TenantId: id, ScopePath: scopeOf(id, "agent:x"), Unit: tokens, Allocated: 5}
		mod(r)
		return r
	}
	cases := []struct {
		name   string
		req    *cyclesv1.CreateBudgetRequest
		code   codes.Code
		reason apierr.Code
		field  string
	}{
		{"no scope", ok(func(r *cyclesv1.CreateBudgetRequest) { r.ScopePath = "" }), codes.InvalidArgument, apierr.InvalidRequest, "scope_path"},
		{"other tenant root", ok(func(r *cyclesv1.CreateBudgetRequest) { r.ScopePath = "tenant:other/agent:x" }), codes.InvalidArgument, apierr.InvalidRequest, "scope_path"},
		{"no tenant root", ok(func(r *cyclesv1.CreateBudgetRequest) { r.ScopePath = "agent:x" }), codes.InvalidArgument, apierr.InvalidRequest, "scope_path"},
		{"levels out of order", ok(func(r *cyclesv1.CreateBudgetRequest) { r.ScopePath = scopeOf(id, "agent:x/workspace:y") }), codes.InvalidArgument, apierr.InvalidRequest, "scope_path"},
		{"level twice", ok(func(r *cyclesv1.CreateBudgetRequest) { r.ScopePath = scopeOf(id, "agent:x/agent:y") }), codes.InvalidArgument, apierr.InvalidRequest, "scope_path"},
		{"unknown level", ok(func(r *cyclesv1.CreateBudgetRequest) { r.ScopePath = scopeOf(id, "team:x") }), codes.InvalidArgument, apierr.InvalidRequest, "scope_path"},
		{"bad value", ok(func(r *cyclesv1.CreateBudgetRequest) { r.ScopePath = scopeOf(id, "agent:a b") }), codes.InvalidArgument, apierr.InvalidRequest, "scope_path"},
		{"trailing slash", ok(func(r *cyclesv1.CreateBudgetRequest) { r.ScopePath = scopeOf(id, "agent:x") + "/" }), codes.InvalidArgument, apierr.InvalidRequest, "scope_path"},
		{"no unit", ok(func(r *cyclesv1.CreateBudgetRequest) { r.Unit = 0 }), codes.InvalidArgument, apierr.InvalidRequest, "unit"},
		{"unknown unit", ok(func(r *cyclesv1.CreateBudgetRequest) { r.Unit = 9 }), codes.InvalidArgument, apierr.InvalidRequest, "unit"},
		{"negative allocated", ok(func(r *cyclesv1.CreateBudgetRequest) { r.Allocated = -1 }), codes.InvalidArgument, apierr.InvalidRequest, "allocated"},
		{"negative overdraft", ok(func(r *cyclesv1.CreateBudgetRequest) { r.OverdraftLimit = -5 }), codes.InvalidArgument, apierr.InvalidRequest, "overdraft_limit"},
		{"unknown policy", ok(func(r *cyclesv1.CreateBudgetRequest) { r.CommitOveragePolicy = 7 }), codes.InvalidArgument, apierr.InvalidRequest, "commit_overage_policy"},
		{"negative cap", ok(func(r *cyclesv1.CreateBudgetRequest) { r.Caps = &cyclesv1.Caps{CooldownMs: &neg} }), codes.InvalidArgument, apierr.InvalidRequest, "caps.cooldown_ms"},
		{"bad metadata", ok(func(r *cyclesv1.CreateBudgetRequest) { r.Metadata = map[string]string{"": "x"} }), codes.InvalidArgument, apierr.InvalidRequest, "metadata"},
		{"unknown tenant", &cyclesv1.CreateBudgetRequest{TenantId: unknown, ScopePath: scopeOf(unknown, ""), Unit: tokens}, codes.NotFound, apierr.TenantNotFound, ""},
		{"suspended tenant", &cyclesv1.CreateBudgetRequest{TenantId: suspended, ScopePath: scopeOf(suspended, ""), Unit: tokens}, codes.FailedPrecondition, apierr.TenantSuspended, ""},
		{"closed tenant", &cyclesv1.CreateBudgetRequest{TenantId: closed, ScopePath: scopeOf(closed, ""), Unit: tokens}, codes.FailedPrecondition, apierr.TenantClosed, ""},
		{"duplicate", ok(func(r *cyclesv1.CreateBudgetRequest) { r.ScopePath = scopeOf(id, "workspace:PROD") }), codes.AlreadyExists, apierr.DuplicateResource, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ae := refusedUnchanged(e, t, tc.req.GetTenantId(), tc.req, e.svc.CreateBudget, tc.code, tc.reason)
			if tc.field != "" && ae.Details["field"] != tc.field {
				t.Fatalf("field = %q, want %q (%v)", ae.Details["field"], tc.field, ae)
			}
		})
	}
}

func TestGetBudgetNotFound(t *testing.T) {
	e := newEnv(t)
	id := e.createTenant()
	e.createBudget(id, "", tokens, 1)
	stranger := newTenantID(t)
	for _, req := range []*cyclesv1.GetBudgetRequest{
		{TenantId: id, ScopePath: scopeOf(id, ""), Unit: credits},
		{TenantId: id, ScopePath: scopeOf(id, "agent:nope"), Unit: tokens},
		{TenantId: stranger, ScopePath: scopeOf(stranger, ""), Unit: tokens},
	} {
		_, err := call(e.ctx, req, e.svc.GetBudget)
		ae := wantRefused(t, err, codes.NotFound, apierr.BudgetNotFound)
		if ae.Details["scope"] != req.GetScopePath() {
			t.Fatalf("details = %v", ae.Details)
		}
	}
	_, err := call(e.ctx, &cyclesv1.GetBudgetRequest{TenantId: id, ScopePath: scopeOf(id, ""), Unit: 0}, e.svc.GetBudget)
	wantRefused(t, err, codes.InvalidArgument, apierr.InvalidRequest)
}

func TestUpdateBudget(t *testing.T) {
	e := newEnv(t)
	id := e.createTenant()
	sp := scopeOf(id, "agent:a")
	e.createBudget(id, "agent:a", tokens, 1000)
	// Seed a debt of 100 (remaining adjusted so the invariant holds).
	ledgertest.PatchBalance(t, e.rdb, keys.Tenant(id).Budget(sp, "TOKENS"), map[string]string{"debt": "100", "remaining": "900", "overdraft_limit": "200"})
	e.checkInvariant(id, sp, "TOKENS")
	seven := int64(7)
	steps := []struct {
		name   string
		req    *cyclesv1.UpdateBudgetRequest
		check  func(*cyclesv1.Budget) bool
		events []string
	}{
		{"limit below debt sets the flag", &cyclesv1.UpdateBudgetRequest{OverdraftLimit: i64(50)},
			func(b *cyclesv1.Budget) bool { return b.GetOverdraftLimit() == 50 && b.GetIsOverLimit() },
			[]string{"budget.updated", "budget.over_limit_entered"}},
		{"limit equal to debt clears it", &cyclesv1.UpdateBudgetRequest{OverdraftLimit: i64(100)},
			func(b *cyclesv1.Budget) bool { return b.GetOverdraftLimit() == 100 && !b.GetIsOverLimit() },
			[]string{"budget.updated", "budget.over_limit_exited"}},
		{"policy and caps", &cyclesv1.UpdateBudgetRequest{CommitOveragePolicy: cyclesv1.CommitOveragePolicy_COMMIT_OVERAGE_POLICY_ALLOW_WITH_OVERDRAFT,
			Caps: &cyclesv1.Caps{MaxStepsRemaining: &seven, ToolAllowlist: []string{"search"}}},
			func(b *cyclesv1.Budget) bool {
				return b.GetCommitOveragePolicy() == cyclesv1.CommitOveragePolicy_COMMIT_OVERAGE_POLICY_ALLOW_WITH_OVERDRAFT &&
					b.GetCaps().GetMaxStepsRemaining() == 7 && reflect.DeepEqual(b.GetCaps().GetToolAllowlist(), []string{"search"})
			}, []string{"budget.updated"}},
		{"metadata", &cyclesv1.UpdateBudgetRequest{Metadata: map[string]string{"k": "v"}},
			func(b *cyclesv1.Budget) bool { return reflect.DeepEqual(b.GetMetadata(), map[string]string{"k": "v"}) }, []string{"budget.updated"}},
		{"metadata merges", &cyclesv1.UpdateBudgetRequest{Metadata: map[string]string{"j": "w"}},
			func(b *cyclesv1.Budget) bool {
				return reflect.DeepEqual(b.GetMetadata(), map[string]string{"k": "v", "j": "w"})
			}, []string{"budget.updated"}},
		{"same metadata again is no change", &cyclesv1.UpdateBudgetRequest{Metadata: map[string]string{"k": "v"}},
			func(b *cyclesv1.Budget) bool { return len(b.GetMetadata()) == 2 }, nil},
		{"metadata replaces", &cyclesv1.UpdateBudgetRequest{Metadata: map[string]string{"z": "9"}, ReplaceMetadata: true},
			func(b *cyclesv1.Budget) bool { return reflect.DeepEqual(b.GetMetadata(), map[string]string{"z": "9"}) }, []string{"budget.updated"}},
		{"no change", &cyclesv1.UpdateBudgetRequest{OverdraftLimit: i64(100)}, func(b *cyclesv1.Budget) bool { return true }, nil},
		{"clear caps", &cyclesv1.UpdateBudgetRequest{ClearCaps: true},
			func(b *cyclesv1.Budget) bool { return b.Caps == nil }, []string{"budget.updated"}},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			st.req.TenantId, st.req.ScopePath, st.req.Unit = id, sp, tokens
			n := len(e.events(id))
			snap := e.snapshot(id)
			b := mustCall(t, e.ctx, st.req, e.svc.UpdateBudget).GetBudget()
			if !st.check(b) {
				t.Fatalf("budget = %v", b)
			}
			if got := eventTypes(e.events(id)[n:]); !reflect.DeepEqual(got, st.events) && !(len(got) == 0 && st.events == nil) {
				t.Fatalf("events = %v, want %v", got, st.events)
			}
			if st.events == nil {
				e.unchanged(id, snap)
			}
			e.checkInvariant(id, sp, "TOKENS")
		})
	}
	if _, ok := e.budgetHash(id, sp, "TOKENS")["caps"]; ok {
		t.Fatal("caps field not removed")
	}
	// Allowed while FROZEN.
	mustCall(t, e.ctx, &cyclesv1.FreezeBudgetRequest{TenantId: id, ScopePath: sp, Unit: tokens}, e.svc.FreezeBudget)
	b := mustCall(t, e.ctx, &cyclesv1.UpdateBudgetRequest{TenantId: id, ScopePath: sp, Unit: tokens, OverdraftLimit: i64(0)}, e.svc.UpdateBudget).GetBudget()
	if b.GetStatus() != cyclesv1.BudgetStatus_BUDGET_STATUS_FROZEN || !b.GetIsOverLimit() {
		t.Fatalf("frozen update = %v", b)
	}
	if n := e.metrics.Sum(t, "cycles.admin.budgets.updated"); n != int64(len(steps)+1) { // every step, and the frozen update
		t.Fatalf("budgets.updated = %d", n)
	}

	closedTenant := e.createTenant()
	e.createBudget(closedTenant, "", tokens, 1)
	mustCall(t, e.ctx, &cyclesv1.CloseTenantRequest{TenantId: closedTenant}, e.svc.CloseTenant)
	mustCall(t, e.ctx, &cyclesv1.CloseBudgetRequest{TenantId: id, ScopePath: sp, Unit: tokens}, e.svc.CloseBudget)
	for _, tc := range []struct {
		name   string
		req    *cyclesv1.UpdateBudgetRequest
		code   codes.Code
		reason apierr.Code
	}{
		{"closed budget", &cyclesv1.UpdateBudgetRequest{TenantId: id, ScopePath: sp, Unit: tokens, OverdraftLimit: i64(1)}, codes.FailedPrecondition, apierr.BudgetClosed},
		{"closed tenant", &cyclesv1.UpdateBudgetRequest{TenantId: closedTenant, ScopePath: scopeOf(closedTenant, ""), Unit: tokens, OverdraftLimit: i64(1)}, codes.FailedPrecondition, apierr.TenantClosed},
		{"unknown budget", &cyclesv1.UpdateBudgetRequest{TenantId: id, ScopePath: scopeOf(id, "agent:zz"), Unit: tokens}, codes.NotFound, apierr.BudgetNotFound},
		{"caps and clear_caps", &cyclesv1.UpdateBudgetRequest{TenantId: id, ScopePath: sp, Unit: tokens, Caps: &cyclesv1.Caps{}, ClearCaps: true}, codes.InvalidArgument, apierr.InvalidRequest},
		{"negative limit", &cyclesv1.UpdateBudgetRequest{TenantId: id, ScopePath: sp, Unit: tokens, OverdraftLimit: i64(-1)}, codes.InvalidArgument, apierr.InvalidRequest},
		{"bad scope", &cyclesv1.UpdateBudgetRequest{TenantId: id, ScopePath: "tenant:x", Unit: tokens}, codes.InvalidArgument, apierr.InvalidRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			refusedUnchanged(e, t, tc.req.GetTenantId(), tc.req, e.svc.UpdateBudget, tc.code, tc.reason)
		})
	}
}

func TestBudgetStatusMachine(t *testing.T) {
	e := newEnv(t)
	id := e.createTenant()
	type op struct {
		name string
		run  func(sp string) (*cyclesv1.Budget, error)
	}
	freeze := op{"freeze", func(sp string) (*cyclesv1.Budget, error) {
		r, err := call(e.ctx, &cyclesv1.FreezeBudgetRequest{TenantId: id, ScopePath: sp, Unit: tokens, Reason: "audit"}, e.svc.FreezeBudget)
		return r.GetBudget(), err
	}}
	unfreeze := op{"unfreeze", func(sp string) (*cyclesv1.Budget, error) {
		r, err := call(e.ctx, &cyclesv1.UnfreezeBudgetRequest{TenantId: id, ScopePath: sp, Unit: tokens}, e.svc.UnfreezeBudget)
		return r.GetBudget(), err
	}}
	closeOp := op{"close", func(sp string) (*cyclesv1.Budget, error) {
		r, err := call(e.ctx, &cyclesv1.CloseBudgetRequest{TenantId: id, ScopePath: sp, Unit: tokens}, e.svc.CloseBudget)
		return r.GetBudget(), err
	}}
	const (
		active = cyclesv1.BudgetStatus_BUDGET_STATUS_ACTIVE
		frozen = cyclesv1.BudgetStatus_BUDGET_STATUS_FROZEN
		closed = cyclesv1.BudgetStatus_BUDGET_STATUS_CLOSED
	)
	// reach puts a fresh budget into status from.
	n := 0
	reach := func(from cyclesv1.BudgetStatus) string {
		n++
		path := fmt.Sprintf("agent:s%d", n)
		e.createBudget(id, path, tokens, 10)
		sp := scopeOf(id, path)
		if from == frozen || from == closed {
			if _, err := freeze.run(sp); err != nil {
				t.Fatal(err)
			}
		}
		if from == closed {
			if _, err := closeOp.run(sp); err != nil {
				t.Fatal(err)
			}
		}
		return sp
	}
	cases := []struct {
		from   cyclesv1.BudgetStatus
		op     op
		to     cyclesv1.BudgetStatus
		event  string
		reason apierr.Code
	}{
		{active, freeze, frozen, "budget.frozen", ""},
		{frozen, freeze, 0, "", apierr.BudgetFrozen},
		{closed, freeze, 0, "", apierr.BudgetClosed},
		{frozen, unfreeze, active, "budget.unfrozen", ""},
		{active, unfreeze, 0, "", apierr.InvalidState},
		{closed, unfreeze, 0, "", apierr.InvalidState},
		{active, closeOp, closed, "budget.closed", ""},
		{frozen, closeOp, closed, "budget.closed", ""},
		{closed, closeOp, 0, "", apierr.BudgetClosed},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s from %s", tc.op.name, tc.from), func(t *testing.T) {
			sp := reach(tc.from)
			before := e.snapshot(id)
			nEv := len(e.events(id))
			b, err := tc.op.run(sp)
			if tc.reason != "" {
				wantRefused(t, err, codes.FailedPrecondition, tc.reason)
				e.unchanged(id, before)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if b.GetStatus() != tc.to || b.GetAllocated() != 10 || b.GetRemaining() != 10 {
				t.Fatalf("budget = %v", b)
			}
			evs := e.events(id)[nEv:]
			if len(evs) != 1 || evs[0].Type != tc.event || evs[0].Scope != sp || evs[0].Data["operation"] != "STATUS_CHANGE" {
				t.Fatalf("events = %+v", evs)
			}
			prev := evs[0].Data["previous_state"].(map[string]any)
			next := evs[0].Data["new_state"].(map[string]any)
			if prev["status"] != strings.TrimPrefix(tc.from.String(), "BUDGET_STATUS_") || next["status"] != strings.TrimPrefix(tc.to.String(), "BUDGET_STATUS_") {
				t.Fatalf("event states %v -> %v", prev, next)
			}
		})
	}
	for _, st := range []string{"FROZEN", "ACTIVE", "CLOSED"} {
		if e.metrics.Sum(t, "cycles.admin.budgets.status_changes", attribute.String("status", st)) == 0 {
			t.Fatalf("status_changes{%s} did not move", st)
		}
	}
	// Unknown budget and closed tenant.
	_, err := freeze.run(scopeOf(id, "agent:none"))
	wantRefused(t, err, codes.NotFound, apierr.BudgetNotFound)
	sp := reach(active)
	mustCall(t, e.ctx, &cyclesv1.CloseTenantRequest{TenantId: id}, e.svc.CloseTenant)
	for _, o := range []op{freeze, unfreeze, closeOp} {
		before := e.snapshot(id)
		_, err := o.run(sp)
		wantRefused(t, err, codes.FailedPrecondition, apierr.TenantClosed)
		e.unchanged(id, before)
	}
	_, err = call(e.ctx, &cyclesv1.FreezeBudgetRequest{TenantId: id, ScopePath: sp, Unit: tokens, Reason: strings.Repeat("r", 300)}, e.svc.FreezeBudget)
	wantRefused(t, err, codes.InvalidArgument, apierr.InvalidRequest)
}

// listAll pages through ListBudgets (helpers_test.go's listAll) and returns
// "<scope>|<UNIT>" in order and the number of calls.
func (e *env) listAll(req *cyclesv1.ListBudgetsRequest) ([]string, int) {
	e.t.Helper()
	bs, pages := listAll(e, req, e.svc.ListBudgets, (*cyclesv1.ListBudgetsResponse).GetBudgets)
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = b.GetScopePath() + "|" + strings.TrimPrefix(b.GetUnit().String(), "UNIT_")
	}
	return out, len(pages)
}

func TestListBudgets(t *testing.T) {
	e := newEnv(t)
	id := e.createTenant()
	root := scopeOf(id, "")
	for _, b := range []struct {
		path string
		unit cyclesv1.Unit
	}{
		{"", tokens}, {"", credits},
		{"workspace:prod", tokens}, {"workspace:prod/agent:a", tokens}, {"workspace:prod/agent:b", credits},
		{"workspace:prod2", tokens}, {"workspace:prod2/agent:a", tokens}, {"workspace:pro", tokens},
		{"workspace:prod-x", tokens}, {"workspace:prod.x", tokens},
	} {
		e.createBudget(id, b.path, b.unit, 1)
	}
	other := e.createTenant()
	e.createBudget(other, "workspace:prod", tokens, 1)

	p := func(s ...string) []string {
		out := make([]string, len(s))
		for i, x := range s {
			out[i] = root + x
		}
		return out
	}
	cases := []struct {
		name   string
		prefix string
		unit   cyclesv1.Unit
		want   []string
	}{
		// Byte order of "<scope>|<UNIT>": '-' < '.' < '/' < '2' < 'd' < '|'.
		{"all", "", 0, p("/workspace:prod-x|TOKENS", "/workspace:prod.x|TOKENS",
			"/workspace:prod/agent:a|TOKENS", "/workspace:prod/agent:b|CREDITS", "/workspace:prod2/agent:a|TOKENS",
			"/workspace:prod2|TOKENS", "/workspace:prod|TOKENS", "/workspace:pro|TOKENS", "|CREDITS", "|TOKENS")},
		{"prefix at a segment boundary", root + "/workspace:PROD", 0, p("/workspace:prod/agent:a|TOKENS", "/workspace:prod/agent:b|CREDITS", "/workspace:prod|TOKENS")},
		{"prefix and unit", root + "/workspace:prod", credits, p("/workspace:prod/agent:b|CREDITS")},
		{"unit only", "", credits, p("/workspace:prod/agent:b|CREDITS", "|CREDITS")},
		{"leaf prefix", root + "/workspace:prod/agent:a", 0, p("/workspace:prod/agent:a|TOKENS")},
		{"prefix without budgets", root + "/workspace:none", 0, nil},
		{"root prefix", root, credits, p("/workspace:prod/agent:b|CREDITS", "|CREDITS")},
	}
	for _, tc := range cases {
		for _, limit := range []int32{0, 1, 2, 200} {
			t.Run(fmt.Sprintf("%s limit %d", tc.name, limit), func(t *testing.T) {
				got, calls := e.listAll(&cyclesv1.ListBudgetsRequest{TenantId: id, ScopePrefix: tc.prefix, Unit: tc.unit, Limit: limit})
				if !reflect.DeepEqual(got, tc.want) && !(len(got) == 0 && len(tc.want) == 0) {
					t.Fatalf("got  %v\nwant %v", got, tc.want)
				}
				if limit == 1 && len(tc.want) > 1 && calls < len(tc.want) {
					t.Fatalf("%d calls for %d items at limit 1", calls, len(tc.want))
				}
			})
		}
	}
	resp := mustCall(t, e.ctx, &cyclesv1.ListBudgetsRequest{TenantId: id, Limit: 2}, e.svc.ListBudgets)
	if len(resp.GetBudgets()) != 2 || !resp.GetHasMore() || resp.GetBudgets()[0].GetTenantId() != id {
		t.Fatalf("page = %v", resp)
	}

	foreign := base64.RawURLEncoding.EncodeToString([]byte("tenant:" + other + "/workspace:prod|TOKENS"))
	outside := base64.RawURLEncoding.EncodeToString([]byte(root + "/workspace:prod2|TOKENS"))
	for _, tc := range []struct {
		name string
		req  *cyclesv1.ListBudgetsRequest
	}{
		{"garbage cursor", &cyclesv1.ListBudgetsRequest{TenantId: id, Cursor: "!!!"}},
		{"cursor of another tenant", &cyclesv1.ListBudgetsRequest{TenantId: id, Cursor: foreign}},
		{"cursor outside the prefix", &cyclesv1.ListBudgetsRequest{TenantId: id, ScopePrefix: root + "/workspace:prod", Cursor: outside}},
		{"negative limit", &cyclesv1.ListBudgetsRequest{TenantId: id, Limit: -1}},
		{"bad prefix", &cyclesv1.ListBudgetsRequest{TenantId: id, ScopePrefix: "tenant:" + other}},
		{"malformed prefix", &cyclesv1.ListBudgetsRequest{TenantId: id, ScopePrefix: "nope"}},
		{"unknown unit", &cyclesv1.ListBudgetsRequest{TenantId: id, Unit: 12}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := call(e.ctx, tc.req, e.svc.ListBudgets)
			wantRefused(t, err, codes.InvalidArgument, apierr.InvalidRequest)
		})
	}
}

func TestListBudgetsBoundsTheWorkPerCall(t *testing.T) {
	e := newEnv(t)
	id := e.createTenant()
	ctx := context.Background()
	tk := keys.Tenant(id)
	// Seed ListScanBound+50 CREDITS budgets directly, then one TOKENS budget
	// that sorts after all of them.
	pipe := e.rdb.Pipeline()
	for i := 0; i < ListScanBound+50; i++ {
		sp := fmt.Sprintf("tenant:%s/agent:a%05d", id, i)
		pipe.HSet(ctx, tk.Budget(sp, "CREDITS"), "scope_path", sp, "unit", "CREDITS", keys.BalanceField, "ACTIVE:1:0:0:1:0:0:0")
		pipe.ZAdd(ctx, tk.Budgets(), redisZ(keys.BudgetMember(sp, "CREDITS")))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	e.createBudget(id, "agent:z", tokens, 5)

	first := mustCall(t, e.ctx, &cyclesv1.ListBudgetsRequest{TenantId: id, Unit: tokens}, e.svc.ListBudgets)
	if len(first.GetBudgets()) != 0 || !first.GetHasMore() || first.GetNextCursor() == "" {
		t.Fatalf("first page = %d budgets, has_more %v: the scan bound was not applied", len(first.GetBudgets()), first.GetHasMore())
	}
	got, calls := e.listAll(&cyclesv1.ListBudgetsRequest{TenantId: id, Unit: tokens})
	if !reflect.DeepEqual(got, []string{scopeOf(id, "agent:z") + "|TOKENS"}) || calls != 2 {
		t.Fatalf("got %v in %d calls", got, calls)
	}
	all, _ := e.listAll(&cyclesv1.ListBudgetsRequest{TenantId: id, Limit: 200})
	if len(all) != ListScanBound+51 {
		t.Fatalf("listed %d budgets", len(all))
	}
	seen := map[string]bool{}
	for _, m := range all {
		if seen[m] {
			t.Fatalf("%s listed twice", m)
		}
		seen[m] = true
	}
}

// Budgets seeded directly (only the packed balance) are readable; malformed
// stored values fail closed with INTERNAL_ERROR and nothing is written.
func TestSeededAndMalformedBudgets(t *testing.T) {
	e := newEnv(t)
	id := e.createTenant()
	ctx := context.Background()
	tk := keys.Tenant(id)
	sp := scopeOf(id, "agent:seeded")
	e.rdb.HSet(ctx, tk.Budget(sp, "TOKENS"), keys.BalanceField, "ACTIVE:7:3:0:10:0:0:0")
	e.rdb.ZAdd(ctx, tk.Budgets(), redisZ(keys.BudgetMember(sp, "TOKENS")))
	b := mustCall(t, e.ctx, &cyclesv1.GetBudgetRequest{TenantId: id, ScopePath: sp, Unit: tokens}, e.svc.GetBudget).GetBudget()
	if b.GetScopePath() != sp || b.GetUnit() != tokens || b.GetStatus() != cyclesv1.BudgetStatus_BUDGET_STATUS_ACTIVE || b.GetRemaining() != 7 || b.GetReserved() != 3 {
		t.Fatalf("seeded budget = %v", b)
	}
	list := mustCall(t, e.ctx, &cyclesv1.ListBudgetsRequest{TenantId: id}, e.svc.ListBudgets)
	if len(list.GetBudgets()) != 1 || !proto.Equal(list.GetBudgets()[0], b) {
		t.Fatalf("list = %v", list)
	}
	f := mustCall(t, e.ctx, fundReq(id, sp, 5, "s1"), e.svc.FundBudget)
	if f.GetNewRemaining() != 12 || f.GetBudget().GetScopePath() != sp {
		t.Fatalf("fund seeded = %v", f)
	}

	ledgertest.PatchBalance(t, e.rdb, tk.Budget(sp, "TOKENS"), map[string]string{"remaining": "1e3"})
	_, err := call(e.ctx, &cyclesv1.GetBudgetRequest{TenantId: id, ScopePath: sp, Unit: tokens}, e.svc.GetBudget)
	wantRefused(t, err, codes.Internal, apierr.InternalError)
	refusedUnchanged(e, t, id, fundReq(id, sp, 5, "s2"), e.svc.FundBudget, codes.Internal, apierr.InternalError)
	ledgertest.PatchBalance(t, e.rdb, tk.Budget(sp, "TOKENS"), map[string]string{"remaining": "12", "status": "PAUSED"})
	refusedUnchanged(e, t, id, &cyclesv1.FreezeBudgetRequest{TenantId: id, ScopePath: sp, Unit: tokens}, e.svc.FreezeBudget, codes.Internal, apierr.InternalError)
}

func fundReq(tenant, sp string, amount int64, key string) *cyclesv1.FundBudgetRequest {
	return &cyclesv1.FundBudgetRequest{TenantId: tenant, ScopePath: sp, Unit: tokens,
		Operation: cyclesv1.FundingOperation_FUNDING_OPERATION_CREDIT, Amount: amount, IdempotencyKey: key}
}
