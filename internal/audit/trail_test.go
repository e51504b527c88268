package audit_test

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/audit"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/test/errtest"
	"github.com/cyclesgo/cycles-go/test/grpctest"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
)

// fx is one case's tenant.
type fx struct {
	e      *env
	tenant string
	// lenient: setup failures are ignored (a test that only needs the calls
	// to run, whatever they answer).
	lenient bool
}

func (f *fx) scope(rest string) string {
	return ledgertest.ScopePath(f.tenant, rest)
}

// setup runs an audited call that is not under test (its own request id).
func (f *fx) setup(fn func(ctx context.Context) error) {
	f.e.t.Helper()
	if err := fn(adminCtx(newRequestID(f.e.t))); err != nil && !f.lenient {
		f.e.t.Fatalf("setup: %v", err)
	}
}

// key creates an API key of the fixture's tenant outside the call under test
// and returns its id.
func (f *fx) key() string {
	var id string
	f.setup(func(ctx context.Context) error {
		r, err := f.e.adm.CreateApiKey(ctx, &cyclesv1.CreateApiKeyRequest{TenantId: f.tenant, Name: "k"})
		id = r.GetApiKey().GetKeyId()
		return err
	})
	return id
}

// quarantined returns a reservation the sweeper quarantined (its budget no
// longer carries the hold: RESERVED_UNDERFLOW).
func (f *fx) quarantined() string {
	t := f.e.t
	t.Helper()
	ctx := grpctest.AsTenant(context.Background(), f.tenant)
	r, err := f.e.rt.CreateReservation(ctx, &cyclesv1.CreateReservationRequest{IdempotencyKey: "q-1", Subject: &cyclesv1.Subject{Tenant: f.tenant},
		Action: &cyclesv1.Action{Kind: "llm.completion", Name: "m"}, Estimate: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 40}})
	if err != nil {
		if f.lenient {
			return ""
		}
		t.Fatalf("reserve: %v", err)
	}
	id := r.GetReservationId()
	tk := keys.Tenant(f.tenant)
	past := time.Now().UnixMilli() - 60_000
	bg := context.Background()
	f.e.c.HSet(bg, tk.Reservation(id), "expires_at", strconv.FormatInt(past, 10), "grace_ms", "0")
	ledgertest.PatchBalance(f.e.t, f.e.c, tk.Budget(f.scope(""), "TOKENS"), map[string]string{"reserved": "0", "remaining": "1000"})
	f.e.c.ZAdd(bg, tk.Deadlines(), ledgertestZ(past, id))
	f.setup(func(ctx context.Context) error {
		return errtest.ErrOf(f.e.ops.SweepTenant(ctx, &cyclesv1.SweepTenantRequest{TenantId: f.tenant}))
	})
	return id
}

// mutation is one audited RPC: a call that succeeds and one that is refused
// (nil when no input can make it refuse), each returning the tenant and
// resource its entry must name.
type mutation struct {
	status int32
	code   apierr.Code
	ok     func(ctx context.Context, f *fx) (tenant, resource string, err error)
	refuse func(ctx context.Context, f *fx) (tenant, resource string, err error)
}

// rows: a bulk action's success also leaves one entry per row (same request
// id, the row's own operation).
var rows = map[string]int{
	cyclesv1.OperatorService_BulkActionTenants_FullMethodName: 1,
	cyclesv1.OperatorService_BulkActionBudgets_FullMethodName: 1,
}

func budgetID(scope string) string { return scope + "|TOKENS" }

var mutations = map[string]mutation{
	cyclesv1.PolicyService_CreateScopePolicy_FullMethodName: {201, apierr.DuplicateResource,
		func(ctx context.Context, f *fx) (string, string, error) {
			r, err := f.e.pol.CreateScopePolicy(ctx, &cyclesv1.CreateScopePolicyRequest{TenantId: f.tenant, Name: "p1", ScopePattern: f.scope("*")})
			return f.tenant, r.GetPolicy().GetPolicyId(), err
		},
		func(ctx context.Context, f *fx) (string, string, error) {
			f.setup(func(ctx context.Context) error {
				return errtest.ErrOf(f.e.pol.CreateScopePolicy(ctx, &cyclesv1.CreateScopePolicyRequest{TenantId: f.tenant, Name: "p2", ScopePattern: f.scope("*")}))
			})
			_, err := f.e.pol.CreateScopePolicy(ctx, &cyclesv1.CreateScopePolicyRequest{TenantId: f.tenant, Name: "p2", ScopePattern: f.scope("*")})
			return f.tenant, "", err
		}},
	cyclesv1.PolicyService_UpdateScopePolicy_FullMethodName: {200, apierr.NotFound,
		func(ctx context.Context, f *fx) (string, string, error) {
			var id string
			f.setup(func(ctx context.Context) error {
				r, err := f.e.pol.CreateScopePolicy(ctx, &cyclesv1.CreateScopePolicyRequest{TenantId: f.tenant, Name: "u1", ScopePattern: f.scope("*")})
				id = r.GetPolicy().GetPolicyId()
				return err
			})
			prio := int32(3)
			_, err := f.e.pol.UpdateScopePolicy(ctx, &cyclesv1.UpdateScopePolicyRequest{TenantId: f.tenant, PolicyId: id, Priority: &prio})
			return f.tenant, id, err
		},
		func(ctx context.Context, f *fx) (string, string, error) {
			prio := int32(3)
			none := "pol_" + f.tenant + "_" + strings.Repeat("0", 32)
			_, err := f.e.pol.UpdateScopePolicy(ctx, &cyclesv1.UpdateScopePolicyRequest{TenantId: f.tenant, PolicyId: none, Priority: &prio})
			return f.tenant, none, err
		}},
	cyclesv1.OperatorService_BulkActionTenants_FullMethodName: {status: 200, code: apierr.CountMismatch,
		ok: func(ctx context.Context, f *fx) (string, string, error) {
			_, err := f.e.op.BulkActionTenants(ctx, &cyclesv1.BulkActionTenantsRequest{Filter: &cyclesv1.TenantBulkFilter{Search: f.tenant},
				Action: cyclesv1.TenantBulkAction_TENANT_BULK_ACTION_SUSPEND, ExpectedCount: ptr(int64(1)), IdempotencyKey: "b-" + f.tenant})
			return audit.AdminTenant, "bulk-action", err
		},
		refuse: func(ctx context.Context, f *fx) (string, string, error) {
			_, err := f.e.op.BulkActionTenants(ctx, &cyclesv1.BulkActionTenantsRequest{Filter: &cyclesv1.TenantBulkFilter{Search: f.tenant},
				Action: cyclesv1.TenantBulkAction_TENANT_BULK_ACTION_CLOSE, ExpectedCount: ptr(int64(5)), IdempotencyKey: "c-" + f.tenant})
			return audit.AdminTenant, "bulk-action", err
		}},
	cyclesv1.OperatorService_BulkActionBudgets_FullMethodName: {status: 200, code: apierr.CountMismatch,
		ok: func(ctx context.Context, f *fx) (string, string, error) {
			_, err := f.e.op.BulkActionBudgets(ctx, &cyclesv1.BulkActionBudgetsRequest{Filter: &cyclesv1.BudgetBulkFilter{TenantId: f.tenant},
				Action: cyclesv1.FundingOperation_FUNDING_OPERATION_CREDIT, Amount: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 5},
				IdempotencyKey: "b-1"})
			return f.tenant, "bulk-action", err
		},
		refuse: func(ctx context.Context, f *fx) (string, string, error) {
			_, err := f.e.op.BulkActionBudgets(ctx, &cyclesv1.BulkActionBudgetsRequest{Filter: &cyclesv1.BudgetBulkFilter{TenantId: f.tenant},
				Action: cyclesv1.FundingOperation_FUNDING_OPERATION_CREDIT, Amount: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 5},
				ExpectedCount: ptr(int64(3)), IdempotencyKey: "b-2"})
			return f.tenant, "bulk-action", err
		}},
	cyclesv1.AdminService_CreateTenant_FullMethodName: {201, apierr.DuplicateResource,
		func(ctx context.Context, f *fx) (string, string, error) {
			id := strings.ReplaceAll(ledgertest.NewTenantID(f.e.t), "_", "-")
			_, err := f.e.adm.CreateTenant(ctx, &cyclesv1.CreateTenantRequest{TenantId: id, Name: "n"})
			return id, id, err
		},
		func(ctx context.Context, f *fx) (string, string, error) {
			_, err := f.e.adm.CreateTenant(ctx, &cyclesv1.CreateTenantRequest{TenantId: f.tenant, Name: "n"})
			return f.tenant, f.tenant, err
		}},
	cyclesv1.AdminService_UpdateTenant_FullMethodName: {200, apierr.InvalidRequest,
		func(ctx context.Context, f *fx) (string, string, error) {
			name := "renamed"
			_, err := f.e.adm.UpdateTenant(ctx, &cyclesv1.UpdateTenantRequest{TenantId: f.tenant, Name: &name})
			return f.tenant, f.tenant, err
		},
		func(ctx context.Context, f *fx) (string, string, error) {
			bad := int64(-1)
			_, err := f.e.adm.UpdateTenant(ctx, &cyclesv1.UpdateTenantRequest{TenantId: f.tenant, MaxReservationTtlMs: &bad})
			return f.tenant, f.tenant, err
		}},
	cyclesv1.AdminService_CloseTenant_FullMethodName: {200, apierr.TenantNotFound,
		func(ctx context.Context, f *fx) (string, string, error) {
			_, err := f.e.adm.CloseTenant(ctx, &cyclesv1.CloseTenantRequest{TenantId: f.tenant})
			return f.tenant, f.tenant, err
		},
		func(ctx context.Context, f *fx) (string, string, error) {
			_, err := f.e.adm.CloseTenant(ctx, &cyclesv1.CloseTenantRequest{TenantId: "no-such-" + f.tenant})
			return audit.AdminTenant, "no-such-" + f.tenant, err
		}},
	cyclesv1.AdminService_CreateApiKey_FullMethodName: {201, apierr.TenantNotFound,
		func(ctx context.Context, f *fx) (string, string, error) {
			r, err := f.e.adm.CreateApiKey(ctx, &cyclesv1.CreateApiKeyRequest{TenantId: f.tenant, Name: "k"})
			return f.tenant, r.GetApiKey().GetKeyId(), err
		},
		func(ctx context.Context, f *fx) (string, string, error) {
			_, err := f.e.adm.CreateApiKey(ctx, &cyclesv1.CreateApiKeyRequest{TenantId: "no-such-" + f.tenant, Name: "k"})
			return audit.AdminTenant, "", err
		}},
	cyclesv1.AdminService_RevokeApiKey_FullMethodName: {200, apierr.KeyNotFound,
		func(ctx context.Context, f *fx) (string, string, error) {
			id := f.key()
			_, err := f.e.adm.RevokeApiKey(ctx, &cyclesv1.RevokeApiKeyRequest{TenantId: f.tenant, KeyId: id})
			return f.tenant, id, err
		},
		func(ctx context.Context, f *fx) (string, string, error) {
			_, err := f.e.adm.RevokeApiKey(ctx, &cyclesv1.RevokeApiKeyRequest{TenantId: f.tenant, KeyId: "0123456789abcdef"})
			return f.tenant, f.tenant + "_0123456789abcdef", err
		}},
	cyclesv1.AdminService_UpdateApiKey_FullMethodName: {200, apierr.KeyNotFound,
		func(ctx context.Context, f *fx) (string, string, error) {
			id := f.key()
			_, err := f.e.adm.UpdateApiKey(ctx, &cyclesv1.UpdateApiKeyRequest{TenantId: f.tenant, KeyId: id,
				ScopeFilter: &cyclesv1.ApiKeyStrings{Values: []string{"workspace:w"}}})
			return f.tenant, id, err
		},
		func(ctx context.Context, f *fx) (string, string, error) {
			_, err := f.e.adm.UpdateApiKey(ctx, &cyclesv1.UpdateApiKeyRequest{TenantId: f.tenant, KeyId: "0123456789abcdef", Name: ptr("x")})
			return f.tenant, f.tenant + "_0123456789abcdef", err
		}},
	cyclesv1.AdminService_CreateBudget_FullMethodName: {201, apierr.DuplicateResource,
		func(ctx context.Context, f *fx) (string, string, error) {
			_, err := f.e.adm.CreateBudget(ctx, &cyclesv1.CreateBudgetRequest{TenantId: f.tenant, ScopePath: f.scope("workspace:w"),
				Unit: cyclesv1.Unit_UNIT_TOKENS, Allocated: 10})
			return f.tenant, budgetID(f.scope("workspace:w")), err
		},
		func(ctx context.Context, f *fx) (string, string, error) {
			_, err := f.e.adm.CreateBudget(ctx, &cyclesv1.CreateBudgetRequest{TenantId: f.tenant, ScopePath: f.scope(""),
				Unit: cyclesv1.Unit_UNIT_TOKENS, Allocated: 10})
			return f.tenant, budgetID(f.scope("")), err
		}},
	cyclesv1.AdminService_FundBudget_FullMethodName: {200, apierr.BudgetNotFound,
		func(ctx context.Context, f *fx) (string, string, error) {
			_, err := f.e.adm.FundBudget(ctx, &cyclesv1.FundBudgetRequest{TenantId: f.tenant, ScopePath: f.scope(""),
				Unit: cyclesv1.Unit_UNIT_TOKENS, Operation: cyclesv1.FundingOperation_FUNDING_OPERATION_CREDIT, Amount: 5, IdempotencyKey: "f-1"})
			return f.tenant, budgetID(f.scope("")), err
		},
		func(ctx context.Context, f *fx) (string, string, error) {
			_, err := f.e.adm.FundBudget(ctx, &cyclesv1.FundBudgetRequest{TenantId: f.tenant, ScopePath: f.scope("workspace:none"),
				Unit: cyclesv1.Unit_UNIT_TOKENS, Operation: cyclesv1.FundingOperation_FUNDING_OPERATION_CREDIT, Amount: 5, IdempotencyKey: "f-2"})
			return f.tenant, budgetID(f.scope("workspace:none")), err
		}},
	cyclesv1.AdminService_UpdateBudget_FullMethodName: {200, apierr.BudgetNotFound,
		func(ctx context.Context, f *fx) (string, string, error) {
			od := int64(5)
			_, err := f.e.adm.UpdateBudget(ctx, &cyclesv1.UpdateBudgetRequest{TenantId: f.tenant, ScopePath: f.scope(""),
				Unit: cyclesv1.Unit_UNIT_TOKENS, OverdraftLimit: &od})
			return f.tenant, budgetID(f.scope("")), err
		},
		func(ctx context.Context, f *fx) (string, string, error) {
			od := int64(5)
			_, err := f.e.adm.UpdateBudget(ctx, &cyclesv1.UpdateBudgetRequest{TenantId: f.tenant, ScopePath: f.scope("workspace:none"),
				Unit: cyclesv1.Unit_UNIT_TOKENS, OverdraftLimit: &od})
			return f.tenant, budgetID(f.scope("workspace:none")), err
		}},
	cyclesv1.AdminService_FreezeBudget_FullMethodName: {200, apierr.BudgetFrozen,
		func(ctx context.Context, f *fx) (string, string, error) {
			_, err := f.e.adm.FreezeBudget(ctx, &cyclesv1.FreezeBudgetRequest{TenantId: f.tenant, ScopePath: f.scope(""), Unit: cyclesv1.Unit_UNIT_TOKENS})
			return f.tenant, budgetID(f.scope("")), err
		},
		func(ctx context.Context, f *fx) (string, string, error) { // frozen by ok
			_, err := f.e.adm.FreezeBudget(ctx, &cyclesv1.FreezeBudgetRequest{TenantId: f.tenant, ScopePath: f.scope(""), Unit: cyclesv1.Unit_UNIT_TOKENS})
			return f.tenant, budgetID(f.scope("")), err
		}},
	cyclesv1.AdminService_UnfreezeBudget_FullMethodName: {200, apierr.InvalidState,
		func(ctx context.Context, f *fx) (string, string, error) {
			f.setup(func(ctx context.Context) error {
				return errtest.ErrOf(f.e.adm.FreezeBudget(ctx, &cyclesv1.FreezeBudgetRequest{TenantId: f.tenant, ScopePath: f.scope(""), Unit: cyclesv1.Unit_UNIT_TOKENS}))
			})
			_, err := f.e.adm.UnfreezeBudget(ctx, &cyclesv1.UnfreezeBudgetRequest{TenantId: f.tenant, ScopePath: f.scope(""), Unit: cyclesv1.Unit_UNIT_TOKENS})
			return f.tenant, budgetID(f.scope("")), err
		},
		func(ctx context.Context, f *fx) (string, string, error) { // ACTIVE again
			_, err := f.e.adm.UnfreezeBudget(ctx, &cyclesv1.UnfreezeBudgetRequest{TenantId: f.tenant, ScopePath: f.scope(""), Unit: cyclesv1.Unit_UNIT_TOKENS})
			return f.tenant, budgetID(f.scope("")), err
		}},
	cyclesv1.AdminService_CloseBudget_FullMethodName: {200, apierr.BudgetClosed,
		func(ctx context.Context, f *fx) (string, string, error) {
			_, err := f.e.adm.CloseBudget(ctx, &cyclesv1.CloseBudgetRequest{TenantId: f.tenant, ScopePath: f.scope(""), Unit: cyclesv1.Unit_UNIT_TOKENS})
			return f.tenant, budgetID(f.scope("")), err
		},
		func(ctx context.Context, f *fx) (string, string, error) {
			_, err := f.e.adm.CloseBudget(ctx, &cyclesv1.CloseBudgetRequest{TenantId: f.tenant, ScopePath: f.scope(""), Unit: cyclesv1.Unit_UNIT_TOKENS})
			return f.tenant, budgetID(f.scope("")), err
		}},
	cyclesv1.OpsService_PauseSweeper_FullMethodName: {200, apierr.InvalidRequest,
		func(ctx context.Context, f *fx) (string, string, error) {
			_, err := f.e.ops.PauseSweeper(ctx, &cyclesv1.PauseSweeperRequest{Reason: "audit test"})
			f.setup(func(ctx context.Context) error {
				return errtest.ErrOf(f.e.ops.ResumeSweeper(ctx, &cyclesv1.ResumeSweeperRequest{}))
			})
			return audit.AdminTenant, "sweeper", err
		},
		func(ctx context.Context, f *fx) (string, string, error) {
			_, err := f.e.ops.PauseSweeper(ctx, &cyclesv1.PauseSweeperRequest{Reason: strings.Repeat("x", 5000)})
			return audit.AdminTenant, "sweeper", err
		}},
	cyclesv1.OpsService_ResumeSweeper_FullMethodName: {200, "",
		func(ctx context.Context, f *fx) (string, string, error) {
			_, err := f.e.ops.ResumeSweeper(ctx, &cyclesv1.ResumeSweeperRequest{})
			return audit.AdminTenant, "sweeper", err
		}, nil},
	cyclesv1.OpsService_TriggerSweep_FullMethodName: {200, "",
		func(ctx context.Context, f *fx) (string, string, error) {
			_, err := f.e.ops.TriggerSweep(ctx, &cyclesv1.TriggerSweepRequest{})
			return audit.AdminTenant, "sweeper", err
		}, nil},
	cyclesv1.OpsService_SweepTenant_FullMethodName: {200, apierr.InvalidRequest,
		func(ctx context.Context, f *fx) (string, string, error) {
			_, err := f.e.ops.SweepTenant(ctx, &cyclesv1.SweepTenantRequest{TenantId: f.tenant})
			return f.tenant, f.tenant, err
		},
		func(ctx context.Context, f *fx) (string, string, error) {
			_, err := f.e.ops.SweepTenant(ctx, &cyclesv1.SweepTenantRequest{TenantId: "Not A Tenant"})
			return audit.AdminTenant, "Not A Tenant", err
		}},
	cyclesv1.OpsService_ResolveQuarantined_FullMethodName: {200, apierr.NotFound,
		func(ctx context.Context, f *fx) (string, string, error) {
			id := f.quarantined()
			_, err := f.e.ops.ResolveQuarantined(ctx, &cyclesv1.ResolveQuarantinedRequest{TenantId: f.tenant, ReservationId: id,
				IdempotencyKey: "res-1", Reason: "test",
				Outcome: &cyclesv1.ResolveQuarantinedRequest_ExpireWithoutRefund{ExpireWithoutRefund: &cyclesv1.ExpireWithoutRefund{}}})
			return f.tenant, id, err
		},
		func(ctx context.Context, f *fx) (string, string, error) {
			id := "r_" + f.tenant + "_0123456789abcdef0123456789abcdef"
			_, err := f.e.ops.ResolveQuarantined(ctx, &cyclesv1.ResolveQuarantinedRequest{TenantId: f.tenant, ReservationId: id,
				IdempotencyKey: "res-2", Reason: "test",
				Outcome: &cyclesv1.ResolveQuarantinedRequest_ExpireWithoutRefund{ExpireWithoutRefund: &cyclesv1.ExpireWithoutRefund{}}})
			return f.tenant, id, err
		}},
	cyclesv1.OpsService_RepairTenant_FullMethodName: {200, apierr.InvalidRequest,
		func(ctx context.Context, f *fx) (string, string, error) {
			_, err := f.e.ops.RepairTenant(ctx, &cyclesv1.RepairTenantRequest{TenantId: f.tenant, Apply: true, IdempotencyKey: "rep-1"})
			return f.tenant, f.tenant, err
		},
		func(ctx context.Context, f *fx) (string, string, error) {
			_, err := f.e.ops.RepairTenant(ctx, &cyclesv1.RepairTenantRequest{TenantId: f.tenant, Apply: true})
			return f.tenant, f.tenant, err
		}},
	cyclesv1.QuotaCounterService_ResetActionQuotaCounter_FullMethodName: {200, apierr.NotFound,
		func(ctx context.Context, f *fx) (string, string, error) {
			scope := f.scope("")
			f.counter(scope, "run-1")
			_, err := f.e.qc.ResetActionQuotaCounter(ctx, &cyclesv1.ResetActionQuotaCounterRequest{TenantId: f.tenant, Scope: scope,
				ActionKind: "message.email.send", Window: cyclesv1.ActionQuotaWindow_ACTION_QUOTA_WINDOW_PER_RUN, WindowKey: "run-1", Reason: "test"})
			return f.tenant, scope + "|message.email.send|per_run|run-1", err
		},
		func(ctx context.Context, f *fx) (string, string, error) {
			scope := f.scope("")
			_, err := f.e.qc.ResetActionQuotaCounter(ctx, &cyclesv1.ResetActionQuotaCounterRequest{TenantId: f.tenant, Scope: scope,
				ActionKind: "message.email.send", Window: cyclesv1.ActionQuotaWindow_ACTION_QUOTA_WINDOW_PER_RUN, WindowKey: "run-none", Reason: "test"})
			return f.tenant, scope + "|message.email.send|per_run|run-none", err
		}},
}

// counter writes a live per_run counter of message.email.send at 2 of 5 on
// scope, as the reserve script leaves one (lua/lib/quota.lua).
func (f *fx) counter(scope, run string) {
	f.e.t.Helper()
	k := keys.Tenant(f.tenant).QuotaCounter(scope, "message.email.send", "per_run", run)
	exp := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)
	if err := f.e.c.HSet(context.Background(), k, "n", "2", "lim", "5", "pol", "pol_x", "at", "1", "exp", exp, "sc", scope,
		"k", "message.email.send", "rc", "", "w", "per_run", "wk", run, "ttl", "3600000").Err(); err != nil {
		f.e.t.Fatal(err)
	}
}

// reads are the admin and ops RPCs that change nothing (not audited).
var reads = map[string]bool{
	cyclesv1.AdminService_GetTenant_FullMethodName: true, cyclesv1.AdminService_ListTenants_FullMethodName: true,
	cyclesv1.AdminService_ListApiKeys_FullMethodName: true, cyclesv1.AdminService_GetBudget_FullMethodName: true,
	cyclesv1.AdminService_ListBudgets_FullMethodName: true, cyclesv1.OpsService_GetSweeperStatus_FullMethodName: true,
	cyclesv1.OpsService_ListQuarantined_FullMethodName: true, cyclesv1.OpsService_AuditTenant_FullMethodName: true,
	cyclesv1.PolicyService_GetScopePolicy_FullMethodName: true, cyclesv1.PolicyService_ListScopePolicies_FullMethodName: true,
	cyclesv1.QuotaCounterService_ListActionQuotaCounters_FullMethodName: true,
}

var traceRe = regexp.MustCompile(`^[0-9a-f]{32}$`)

// Every AdminService and OpsService RPC is either a read or an audited
// mutation with a case below; every audited method has a case (the HTTP-only
// admin-on-behalf release is TestHTTPWireAudit's).
func TestEveryMutationIsAudited(t *testing.T) {
	for _, sd := range []struct {
		name    string
		methods []string
	}{
		{cyclesv1.AdminService_ServiceDesc.ServiceName, methodsOf(cyclesv1.AdminService_ServiceDesc.Methods)},
		{cyclesv1.OpsService_ServiceDesc.ServiceName, methodsOf(cyclesv1.OpsService_ServiceDesc.Methods)},
		{cyclesv1.PolicyService_ServiceDesc.ServiceName, methodsOf(cyclesv1.PolicyService_ServiceDesc.Methods)},
		{cyclesv1.OperatorService_ServiceDesc.ServiceName, methodsOf(cyclesv1.OperatorService_ServiceDesc.Methods)},
		{cyclesv1.QuotaCounterService_ServiceDesc.ServiceName, methodsOf(cyclesv1.QuotaCounterService_ServiceDesc.Methods)},
	} {
		for _, m := range sd.methods {
			full := "/" + sd.name + "/" + m
			if !reads[full] && !audit.Audited(full) {
				t.Errorf("%s is neither a read nor audited", full)
			}
			if audit.Audited(full) && reads[full] {
				t.Errorf("%s is audited and listed as a read", full)
			}
		}
	}
	for m := range audit.Operations() {
		if _, ok := mutations[m]; !ok && m != cyclesv1.RuntimeService_ReleaseReservation_FullMethodName {
			t.Errorf("audited %s has no test case", m)
		}
	}
}

// One entry per call, success or refusal, naming who, what, where from.
func TestOneEntryPerMutation(t *testing.T) {
	e := start(t, audit.Options{})
	ops := audit.Operations()
	for method, m := range mutations {
		t.Run(method[strings.LastIndexByte(method, '/')+1:], func(t *testing.T) {
			e.t = t
			f := &fx{e: e, tenant: e.tenant()}
			check := func(rid string, tenant, resource string, status int32, code apierr.Code, rows int) {
				t.Helper()
				all := e.entries(rid)
				var mine []*cyclesv1.AuditLogEntry
				for _, l := range all {
					if l.GetOperation() == ops[method] {
						mine = append(mine, l)
					}
				}
				if len(mine) != 1 || len(all) != 1+rows {
					t.Fatalf("request %s: %d entries of %s and %d in all, want 1 and %d: %v", rid, len(mine), ops[method], len(all), 1+rows, all)
				}
				got := mine[0]
				if got.GetOperation() != ops[method] || got.GetStatus() != status || got.GetErrorCode() != string(code) ||
					got.GetTenantId() != tenant || (resource != "" && got.GetResourceId() != resource) {
					t.Errorf("entry %v; want operation %s status %d code %q tenant %s resource %s", got, ops[method], status, code, tenant, resource)
				}
				if got.GetKeyId() != audit.AdminTenant || got.GetSourceIp() != "127.0.0.1" || !strings.Contains(got.GetUserAgent(), "audit-test") ||
					!traceRe.MatchString(got.GetTraceId()) || !strings.HasPrefix(got.GetLogId(), "aud_") || got.GetTimestampMs() == 0 {
					t.Errorf("entry %v: key, address, user agent, trace or log id missing", got)
				}
			}
			rid := newRequestID(t)
			tenant, resource, err := m.ok(adminCtx(rid), f)
			if err != nil {
				t.Fatalf("success call: %v", err)
			}
			check(rid, tenant, resource, m.status, "", rows[method])
			if m.refuse == nil {
				return
			}
			rid = newRequestID(t)
			tenant, resource, err = m.refuse(adminCtx(rid), f)
			if code, _, _ := apierr.FromStatus(err); code != m.code {
				t.Fatalf("refusal: %v, want %s", err, m.code)
			}
			check(rid, tenant, resource, int32(m.code.HTTPStatus()), m.code, 0)
		})
	}
}

func methodsOf(ms []grpcMethodDesc) []string {
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.MethodName)
	}
	return out
}
