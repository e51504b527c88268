package cycleshttp

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
)

// Every kind of declared wire difference (decode.go wireMembers), read into
// the admin requests: renamed members, amount objects kept as bare integers
// with their unit checked, members the proto lacks (accepted values dropped,
// others refused naming them), numbers kept as text, "" clearing an
// instant, wrappers read from the bare list, and required members. The
// budget bulk body keeps spent for RESET_SPENT only.
func TestDecodeWireMembers(t *testing.T) {
	for _, tc := range []struct {
		name string
		msg  proto.Message // pre-set as the path and query would
		body string
		code apierr.Code // "" = accepted
		fld  string
		want proto.Message
	}{
		{name: "budget scope renamed, amounts exact", msg: &cyclesv1.CreateBudgetRequest{},
			body: `{"scope":"tenant:a","unit":"TOKENS","allocated":{"unit":"TOKENS","amount":9223372036854775807},"overdraft_limit":{"unit":"TOKENS","amount":5}}`,
			want: &cyclesv1.CreateBudgetRequest{ScopePath: "tenant:a", Unit: cyclesv1.Unit_UNIT_TOKENS, Allocated: 9223372036854775807, OverdraftLimit: 5}},
		{name: "unit read after the amount", msg: &cyclesv1.CreateBudgetRequest{},
			body: `{"allocated":{"unit":"TOKENS","amount":1},"unit":"CREDITS"}`, code: apierr.UnitMismatch, fld: "allocated.unit"},
		{name: "allocated required", msg: &cyclesv1.CreateBudgetRequest{}, body: `{"scope":"tenant:a","unit":"TOKENS"}`,
			code: apierr.InvalidRequest, fld: "allocated"},
		{name: "amount is an object", msg: &cyclesv1.CreateBudgetRequest{}, body: `{"allocated":5}`, code: apierr.InvalidRequest, fld: "allocated"},
		{name: "amount needs its unit", msg: &cyclesv1.CreateBudgetRequest{}, body: `{"allocated":{"amount":5}}`,
			code: apierr.InvalidRequest, fld: "allocated.unit"},
		{name: "rollover NONE accepted", msg: &cyclesv1.CreateBudgetRequest{},
			body: `{"allocated":{"unit":"TOKENS","amount":1},"rollover_policy":"NONE","period_start":""}`,
			want: &cyclesv1.CreateBudgetRequest{Allocated: 1}},
		{name: "rollover refused", msg: &cyclesv1.CreateBudgetRequest{}, body: `{"rollover_policy":"CARRY"}`,
			code: apierr.InvalidRequest, fld: "rollover_policy"},
		{name: "budget metadata is strings", msg: &cyclesv1.CreateBudgetRequest{}, body: `{"metadata":{"a":1}}`,
			code: apierr.InvalidRequest, fld: "metadata.a"},
		{name: "fund in the query's unit", msg: &cyclesv1.FundBudgetRequest{Unit: cyclesv1.Unit_UNIT_TOKENS},
			body: `{"operation":"RESET_SPENT","amount":{"unit":"TOKENS","amount":7},"spent":{"unit":"TOKENS","amount":2},"metadata":{"x":1}}`,
			want: &cyclesv1.FundBudgetRequest{Unit: cyclesv1.Unit_UNIT_TOKENS, Operation: cyclesv1.FundingOperation_FUNDING_OPERATION_RESET_SPENT,
				Amount: 7, Spent: proto.Int64(2)}},
		{name: "fund in another unit", msg: &cyclesv1.FundBudgetRequest{Unit: cyclesv1.Unit_UNIT_TOKENS},
			body: `{"operation":"CREDIT","amount":{"unit":"CREDITS","amount":7}}`, code: apierr.UnitMismatch, fld: "amount.unit"},
		{name: "fund operation required", msg: &cyclesv1.FundBudgetRequest{Unit: cyclesv1.Unit_UNIT_TOKENS},
			body: `{"amount":{"unit":"TOKENS","amount":7}}`, code: apierr.InvalidRequest, fld: "operation"},
		{name: "tenant hierarchy refused", msg: &cyclesv1.CreateTenantRequest{}, body: `{"tenant_id":"a","parent_tenant_id":"p"}`,
			code: apierr.InvalidRequest, fld: "parent_tenant_id"},
		{name: "new tenant enforces", msg: &cyclesv1.CreateTenantRequest{}, body: `{"tenant_id":"a","parent_tenant_id":"","observe_mode":"ENFORCE"}`,
			want: &cyclesv1.CreateTenantRequest{TenantId: "a"}},
		{name: "new tenant cannot observe", msg: &cyclesv1.CreateTenantRequest{}, body: `{"observe_mode":"OBSERVE"}`,
			code: apierr.InvalidRequest, fld: "observe_mode"},
		{name: "create has no status", msg: &cyclesv1.CreateTenantRequest{}, body: `{"status":"ACTIVE"}`,
			code: apierr.InvalidRequest, fld: "status"},
		{name: "replace_metadata is gRPC only", msg: &cyclesv1.UpdateTenantRequest{TenantId: "a"}, body: `{"replace_metadata":true}`,
			code: apierr.InvalidRequest, fld: "replace_metadata"},
		{name: "tenant observes by PATCH", msg: &cyclesv1.UpdateTenantRequest{TenantId: "a"}, body: `{"observe_mode":"OBSERVE","status":"SUSPENDED"}`,
			want: &cyclesv1.UpdateTenantRequest{TenantId: "a", ObserveMode: cyclesv1.ObserveMode_OBSERVE_MODE_OBSERVE,
				Status: cyclesv1.TenantStatus_TENANT_STATUS_SUSPENDED}},
		{name: "utilization kept as its text", msg: &cyclesv1.BulkActionBudgetsRequest{},
			body: `{"filter":{"utilization_min":0.50,"over_limit":true},"action":"CREDIT","amount":{"unit":"TOKENS","amount":1}}`,
			want: &cyclesv1.BulkActionBudgetsRequest{Filter: &cyclesv1.BudgetBulkFilter{UtilizationMin: "0.50", OverLimit: proto.Bool(true)},
				Action: cyclesv1.FundingOperation_FUNDING_OPERATION_CREDIT, Amount: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 1}}},
		{name: "utilization is a number", msg: &cyclesv1.BulkActionBudgetsRequest{}, body: `{"filter":{"utilization_max":"1"}}`,
			code: apierr.InvalidRequest, fld: "filter.utilization_max"},
		{name: "bulk filter hierarchy refused", msg: &cyclesv1.BulkActionTenantsRequest{}, body: `{"filter":{"parent_tenant_id":"p"}}`,
			code: apierr.InvalidRequest, fld: "filter.parent_tenant_id"},
		{name: "policy PATCH clears an end and empties a list", msg: &cyclesv1.UpdateScopePolicyRequest{TenantId: "a"},
			body: `{"effective_until":"","allowed_action_kinds":[],"action_quotas":[{"action_kind":"k","max_calls":3,"window":"per_run"}]}`,
			want: &cyclesv1.UpdateScopePolicyRequest{TenantId: "a", EffectiveUntilMs: proto.Int64(0), AllowedActionKinds: &cyclesv1.ActionKindList{},
				ActionQuotas: &cyclesv1.ActionQuotaList{Quotas: []*cyclesv1.ActionQuota{{ActionKind: "k", MaxCalls: 3,
					Window: cyclesv1.ActionQuotaWindow_ACTION_QUOTA_WINDOW_PER_RUN}}}}},
		{name: "policy PATCH names no tenant", msg: &cyclesv1.UpdateScopePolicyRequest{TenantId: "a"}, body: `{"tenant_id":"b"}`,
			code: apierr.InvalidRequest, fld: "tenant_id"},
		{name: "windows are lower case", msg: &cyclesv1.CreateScopePolicyRequest{}, body: `{"action_quotas":[{"window":"PER_RUN"}]}`,
			code: apierr.InvalidRequest, fld: "action_quotas.window"},
		{name: "policy create names its tenant", msg: &cyclesv1.CreateScopePolicyRequest{}, body: `{"scope_pattern":"tenant:a"}`,
			code: apierr.InvalidRequest, fld: "tenant_id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := decodeMessage([]byte(tc.body), tc.msg.ProtoReflect())
			if tc.code == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if !proto.Equal(tc.msg, tc.want) {
					t.Fatalf("decoded %v\nwant    %v", tc.msg, tc.want)
				}
				return
			}
			e, ok := apierr.As(err)
			if !ok || e.Code != tc.code || e.Details["field"] != tc.fld {
				t.Fatalf("err %v (%v), want %s naming %s", err, e, tc.code, tc.fld)
			}
			if strings.TrimSpace(e.Message) == "" {
				t.Fatal("no message")
			}
		})
	}
	for action, keep := range map[string]bool{"RESET_SPENT": true, "CREDIT": false} {
		body := `{"action":"` + action + `","amount":{"unit":"TOKENS","amount":1},"spent":{"unit":"TOKENS","amount":4}}`
		req := &cyclesv1.BulkActionBudgetsRequest{}
		r := httptest.NewRequest(http.MethodPost, "/v1/admin/budgets/bulk-action", strings.NewReader(body))
		err := protoJSON(&API{maxBody: 4096}, httptest.NewRecorder(), r, req)
		if err == nil {
			err = spentOnlyToReset(req)
		}
		if err != nil || (req.Spent != nil) != keep {
			t.Errorf("%s: spent %v (err %v), kept want %v", action, req.Spent, err, keep)
		}
	}
}
