package audit_test

import (
	"sort"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/audit"
	"github.com/cyclesgo/cycles-go/test/grpctest"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
)

func ids(rs []*cyclesv1.BulkRowOutcome) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.GetId()+" "+r.GetErrorCode()+r.GetReason())
	}
	sort.Strings(out)
	return out
}

// A tenant bulk action applies to every match through the admin domain,
// skips rows already in the target state, records one entry per changed row,
// replays its first answer, and refuses another payload under its key, an
// empty filter and a wrong expected count (before any write).
func TestBulkTenants(t *testing.T) {
	e := start(t, audit0())
	prefix := strings.ReplaceAll(ledgertest.NewTenantID(t), "_", "-")
	for _, s := range []string{"a", "b", "c"} {
		if _, err := e.adm.CreateTenant(adminCtx(newRequestID(t)), &cyclesv1.CreateTenantRequest{TenantId: prefix + "-" + s, Name: s}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.adm.UpdateTenant(adminCtx(newRequestID(t)), &cyclesv1.UpdateTenantRequest{TenantId: prefix + "-c",
		Status: cyclesv1.TenantStatus_TENANT_STATUS_SUSPENDED}); err != nil {
		t.Fatal(err)
	}
	req := &cyclesv1.BulkActionTenantsRequest{Filter: &cyclesv1.TenantBulkFilter{Search: prefix},
		Action: cyclesv1.TenantBulkAction_TENANT_BULK_ACTION_SUSPEND, ExpectedCount: ptr(int64(3)), IdempotencyKey: "k-" + prefix}

	wrong := proto.Clone(req).(*cyclesv1.BulkActionTenantsRequest)
	wrong.ExpectedCount = ptr(int64(2))
	if _, err := e.op.BulkActionTenants(adminCtx(newRequestID(t)), wrong); status.Code(err) != codes.FailedPrecondition ||
		!strings.Contains(err.Error(), "COUNT_MISMATCH") {
		t.Fatalf("wrong expected count: %v", err)
	}
	rid := newRequestID(t)
	resp, err := e.op.BulkActionTenants(adminCtx(rid), req)
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(resp.GetSucceeded()); resp.GetTotalMatched() != 3 || len(got) != 2 || len(resp.GetFailed()) != 0 ||
		ids(resp.GetSkipped())[0] != prefix+"-c ALREADY_IN_TARGET_STATE" {
		t.Fatalf("bulk answer %v", resp)
	}
	rowOps := 0
	for _, l := range e.entries(rid) {
		if l.GetOperation() == "updateTenant" && l.GetMetadata()["bulk_idempotency_key"] == req.GetIdempotencyKey() {
			rowOps++
		}
	}
	if rowOps != 2 {
		t.Errorf("%d row entries, want 2", rowOps)
	}
	for _, s := range []string{"a", "b"} {
		g, err := e.adm.GetTenant(adminCtx(newRequestID(t)), &cyclesv1.GetTenantRequest{TenantId: prefix + "-" + s})
		if err != nil || g.GetTenant().GetStatus() != cyclesv1.TenantStatus_TENANT_STATUS_SUSPENDED {
			t.Errorf("tenant %s after the bulk suspend: %v %v", s, g, err)
		}
	}

	rid = newRequestID(t)
	again, err := e.op.BulkActionTenants(adminCtx(rid), req)
	if err != nil || !proto.Equal(again, resp) {
		t.Fatalf("replay: %v %v, want %v", again, err, resp)
	}
	if n := len(e.entries(rid)); n != 1 {
		t.Errorf("a replay left %d entries, want only its own", n)
	}
	other := proto.Clone(req).(*cyclesv1.BulkActionTenantsRequest)
	other.Action = cyclesv1.TenantBulkAction_TENANT_BULK_ACTION_REACTIVATE
	if _, err := e.op.BulkActionTenants(adminCtx(newRequestID(t)), other); status.Code(err) != codes.AlreadyExists {
		t.Errorf("another payload under the key: %v", err)
	}
	if _, err := e.op.BulkActionTenants(adminCtx(newRequestID(t)), &cyclesv1.BulkActionTenantsRequest{Filter: &cyclesv1.TenantBulkFilter{},
		Action: cyclesv1.TenantBulkAction_TENANT_BULK_ACTION_CLOSE, IdempotencyKey: "all"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("empty filter: %v", err)
	}
}

func audit0() audit.Options { return audit.Options{} }

// A budget bulk action funds every match of one tenant through FundBudget;
// a row that cannot be funded fails alone, with the bulk vocabulary's code;
// a no-op row is skipped; the filters the listing lacks apply exactly.
func TestBulkBudgets(t *testing.T) {
	e := start(t, audit0())
	f := &fx{e: e, tenant: e.tenant()} // tenant:T TOKENS 1000
	for _, b := range []ledgertest.Budget{
		{Scope: f.scope("workspace:a"), Unit: "TOKENS", Allocated: 10},
		{Scope: f.scope("workspace:b"), Unit: "TOKENS", Allocated: 100, Spent: 40},
		{Scope: f.scope("workspace:a"), Unit: "CREDITS", Allocated: 10},
	} {
		ledgertest.SeedBudget(t, e.c, f.tenant, b)
	}
	debit := func(filter *cyclesv1.BudgetBulkFilter, key string, op cyclesv1.FundingOperation) *cyclesv1.BulkActionBudgetsResponse {
		t.Helper()
		filter.TenantId = f.tenant
		r, err := e.op.BulkActionBudgets(adminCtx(newRequestID(t)), &cyclesv1.BulkActionBudgetsRequest{Filter: filter, Action: op,
			Amount: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 50}, IdempotencyKey: key})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := debit(&cyclesv1.BudgetBulkFilter{}, "d1", cyclesv1.FundingOperation_FUNDING_OPERATION_DEBIT)
	a, b, c := f.scope("workspace:a"), f.scope("workspace:b"), f.scope("")
	if got, want := ids(r.GetSucceeded()), []string{b + "|TOKENS ", c + "|TOKENS "}; r.GetTotalMatched() != 4 || strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("succeeded %v, want %v (%v)", got, want, r)
	}
	if got, want := ids(r.GetFailed()), []string{a + "|CREDITS INVALID_TRANSITION", a + "|TOKENS BUDGET_EXCEEDED"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("failed %v, want %v", got, want)
	}
	if st := ledgertest.ReadBudget(t, e.c, f.tenant, c, "TOKENS"); st.Allocated.Int64() != 950 {
		t.Errorf("tenant budget after the bulk debit: %s", st)
	}
	r = debit(&cyclesv1.BudgetBulkFilter{Unit: cyclesv1.Unit_UNIT_TOKENS}, "r1", cyclesv1.FundingOperation_FUNDING_OPERATION_REPAY_DEBT)
	if len(r.GetSkipped()) != 3 || len(r.GetSucceeded()) != 0 {
		t.Errorf("repay without debt: %v", r)
	}
	// spent / allocated: a 0/10, b 40/50 after the debit (0.8), tenant 0/950.
	r = debit(&cyclesv1.BudgetBulkFilter{Unit: cyclesv1.Unit_UNIT_TOKENS, UtilizationMin: "0.5", UtilizationMax: "0.8"}, "c1",
		cyclesv1.FundingOperation_FUNDING_OPERATION_CREDIT)
	if got := ids(r.GetSucceeded()); len(got) != 1 || got[0] != b+"|TOKENS " {
		t.Errorf("utilization 0.5..1 matched %v", r)
	}
	r = debit(&cyclesv1.BudgetBulkFilter{Unit: cyclesv1.Unit_UNIT_TOKENS, UtilizationMax: "0", Search: "WORKSPACE:A"}, "c2",
		cyclesv1.FundingOperation_FUNDING_OPERATION_CREDIT)
	if got := ids(r.GetSucceeded()); len(got) != 1 || got[0] != a+"|TOKENS " {
		t.Errorf("utilization 0, search workspace:a: %v", r)
	}

	// The HTTP wire: the spec's body and answer, and its 409 gate.
	as := []string{"X-Admin-API-Key", grpctest.AdminKey}
	body := `{"filter":{"tenant_id":"` + f.tenant + `","unit":"TOKENS","utilization_min":0,"has_debt":false},"action":"CREDIT",` +
		`"amount":{"unit":"TOKENS","amount":1},"expected_count":3,"idempotency_key":"h1"}`
	if hr := e.call("POST", "/v1/admin/budgets/bulk-action", body, as...); hr.status != 200 {
		t.Fatalf("HTTP bulk: %d %s", hr.status, hr.body)
	} else if m := hr.obj(t); m["action"] != "CREDIT" || len(m["succeeded"].([]any)) != 3 || m["idempotency_key"] != "h1" {
		t.Errorf("HTTP bulk answer %v", m)
	}
	if hr := e.call("POST", "/v1/admin/budgets/bulk-action",
		strings.Replace(strings.Replace(body, `"h1"`, `"h2"`, 1), `"expected_count":3`, `"expected_count":9`, 1), as...); hr.status != 409 ||
		hr.obj(t)["error"] != "COUNT_MISMATCH" {
		t.Errorf("HTTP count gate: %d %s", hr.status, hr.body)
	}
	tb := `{"filter":{"search":"` + f.tenant + `"},"action":"SUSPEND","idempotency_key":"t1"}`
	if hr := e.call("POST", "/v1/admin/tenants/bulk-action", tb, as...); hr.status != 200 || hr.obj(t)["total_matched"] == nil {
		t.Errorf("HTTP tenant bulk: %d %s", hr.status, hr.body)
	}
}
