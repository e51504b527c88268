package protowire

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
)

// Every kind of declared wire difference (http.proto's wire options), read into
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
			err := Decode([]byte(tc.body), tc.msg.ProtoReflect())
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
}

// A date-time member binds the int64 field of its name with _ms.
func TestDecodeDateTime(t *testing.T) {
	for _, tc := range []struct {
		body string
		ms   int64
		bad  bool
	}{
		{`{"expires_at":"2026-01-02T15:04:05.123Z"}`, 1767366245123, false},
		{`{"expires_at":"2026-01-02T16:04:05+01:00"}`, 1767366245000, false},
		{`{"expires_at":"yesterday"}`, 0, true},
		{`{"expires_at":5}`, 0, true},
	} {
		req := &cyclesv1.CreateApiKeyRequest{}
		err := Decode([]byte(tc.body), req.ProtoReflect())
		if tc.bad {
			if e, ok := apierr.As(err); !ok || e.Details["field"] != "expires_at" {
				t.Errorf("%s: err = %v, want INVALID_REQUEST naming expires_at", tc.body, err)
			}
			continue
		}
		if err != nil || req.GetExpiresAtMs() != tc.ms {
			t.Errorf("%s: %d, %v; want %d", tc.body, req.GetExpiresAtMs(), err, tc.ms)
		}
	}
}

// A member the path or query has set is no body member: a commit body
// cannot name another reservation; a key PATCH cannot name another key.
func TestDecodeRefusesPathMembers(t *testing.T) {
	commit := &cyclesv1.CommitReservationRequest{ReservationId: "r_a_1"}
	err := Decode([]byte(`{"reservation_id":"r_b_2","actual":{"unit":"TOKENS","amount":1}}`), commit.ProtoReflect())
	if e, ok := apierr.As(err); !ok || e.Details["field"] != "reservation_id" || commit.ReservationId != "r_a_1" {
		t.Fatalf("commit: %v, id %s", err, commit.ReservationId)
	}
	patch := &cyclesv1.UpdateApiKeyRequest{TenantId: "a", KeyId: "0123456789abcdef"}
	err = Decode([]byte(`{"tenant_id":"b"}`), patch.ProtoReflect())
	if e, ok := apierr.As(err); !ok || e.Details["field"] != "tenant_id" || patch.TenantId != "a" {
		t.Fatalf("patch: %v, tenant %s", err, patch.TenantId)
	}
	// Wrappers read the bare list or map; absent stays unset.
	patch = &cyclesv1.UpdateApiKeyRequest{TenantId: "a", KeyId: "0123456789abcdef"}
	if err := Decode([]byte(`{"permissions":["reservations:create"],"metadata":{}}`), patch.ProtoReflect()); err != nil {
		t.Fatal(err)
	}
	if len(patch.GetPermissions().GetValues()) != 1 || patch.Metadata == nil || patch.ScopeFilter != nil {
		t.Fatalf("patch = %v", patch)
	}
}
