package cycleshttp_test

import (
	"net/url"
	"slices"
	"strings"
	"testing"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
)

// TestPolicyListFiltersBothWires: the v0.1.26 listPolicies filters
// has_action_quotas and references_action_kind select the same policies on
// GET /v1/admin/policies and on PolicyService.ListScopePolicies, combine with
// each other and with the v0.1.25 filters, and an over-long kind is refused
// on both wires.
func TestPolicyListFiltersBothWires(t *testing.T) {
	e := startFull(t)
	as := []string{"X-Admin-API-Key", adminKey}
	tenant := strings.ReplaceAll(ledgertest.NewTenantID(t), "_", "-")
	if r := e.call("POST", "/v1/admin/tenants", "", `{"tenant_id":"`+tenant+`","name":"F"}`, as...); r.status != 201 {
		t.Fatalf("tenant: %d %s", r.status, r.body)
	}
	names := map[string]string{} // policy id -> name
	for _, p := range []struct{ name, body string }{
		{"email-quota", `"action_quotas":[{"action_kind":"message.email.send","max_calls":5,"window":"per_hour_tumbling"}]`},
		{"risk-quota", `"risk_class_quotas":[{"risk_class":"external_side_effect","max_calls":9,"window":"per_day_tumbling"}]`},
		{"deny-charge", `"denied_action_kinds":["payment.charge"]`},
		{"allow-email", `"allowed_action_kinds":["message.email.send","llm.completion"],"status":"DISABLED"`},
		{"caps-only", `"caps":{"max_tokens":10}`},
	} {
		r := e.call("POST", "/v1/admin/policies", "", `{"tenant_id":"`+tenant+`","name":"`+p.name+`",`+
			`"scope_pattern":"tenant:`+tenant+`/agent:*",`+p.body+`}`, as...)
		if r.status != 201 {
			t.Fatalf("policy %s: %d %s", p.name, r.status, r.body)
		}
		names[r.obj(t)["policy_id"].(string)] = p.name
	}
	pol := cyclesv1.NewPolicyServiceClient(e.conn)
	yes, no := true, false
	for _, c := range []struct {
		name  string
		query url.Values
		req   *cyclesv1.ListScopePoliciesRequest
		want  []string // sorted names; nil with field set: refused
		field string
	}{
		{name: "no filter", query: url.Values{}, req: &cyclesv1.ListScopePoliciesRequest{},
			want: []string{"allow-email", "caps-only", "deny-charge", "email-quota", "risk-quota"}},
		{name: "has_action_quotas=true: action or risk-class quotas", query: url.Values{"has_action_quotas": {"true"}},
			req: &cyclesv1.ListScopePoliciesRequest{HasActionQuotas: &yes}, want: []string{"email-quota", "risk-quota"}},
		{name: "has_action_quotas=false: none of either", query: url.Values{"has_action_quotas": {"false"}},
			req: &cyclesv1.ListScopePoliciesRequest{HasActionQuotas: &no}, want: []string{"allow-email", "caps-only", "deny-charge"}},
		{name: "kind named by a quota and an allowlist", query: url.Values{"references_action_kind": {"message.email.send"}},
			req: &cyclesv1.ListScopePoliciesRequest{ReferencesActionKind: "message.email.send"}, want: []string{"allow-email", "email-quota"}},
		{name: "kind named by a denylist", query: url.Values{"references_action_kind": {"payment.charge"}},
			req: &cyclesv1.ListScopePoliciesRequest{ReferencesActionKind: "payment.charge"}, want: []string{"deny-charge"}},
		{name: "kind named by no policy (a risk class is not a kind)", query: url.Values{"references_action_kind": {"external_side_effect"}},
			req: &cyclesv1.ListScopePoliciesRequest{ReferencesActionKind: "external_side_effect"}, want: []string{}},
		{name: "both filters combine", query: url.Values{"references_action_kind": {"message.email.send"}, "has_action_quotas": {"true"}},
			req: &cyclesv1.ListScopePoliciesRequest{ReferencesActionKind: "message.email.send", HasActionQuotas: &yes}, want: []string{"email-quota"}},
		{name: "with the v0.1.25 status filter", query: url.Values{"references_action_kind": {"message.email.send"}, "status": {"ACTIVE"}},
			req:  &cyclesv1.ListScopePoliciesRequest{ReferencesActionKind: "message.email.send", Status: cyclesv1.PolicyStatus_POLICY_STATUS_ACTIVE},
			want: []string{"email-quota"}},
		{name: "kind longer than 64 characters", query: url.Values{"references_action_kind": {strings.Repeat("k", 65)}},
			req: &cyclesv1.ListScopePoliciesRequest{ReferencesActionKind: strings.Repeat("k", 65)}, field: "references_action_kind"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.query.Set("tenant_id", tenant)
			r := e.call("GET", "/v1/admin/policies?"+c.query.Encode(), "", "", as...)
			c.req.TenantId = tenant
			g, gerr := pol.ListScopePolicies(adminCtx(), c.req)
			if c.field != "" {
				if r.status != 400 || !strings.Contains(string(r.body), c.field) {
					t.Errorf("HTTP: %d %s, want 400 naming %s", r.status, r.body, c.field)
				}
				if gerr == nil || !strings.Contains(gerr.Error(), c.field) {
					t.Errorf("gRPC: %v, want INVALID_ARGUMENT naming %s", gerr, c.field)
				}
				return
			}
			if r.status != 200 || gerr != nil {
				t.Fatalf("HTTP %d %s; gRPC %v", r.status, r.body, gerr)
			}
			var overHTTP, overGRPC []string
			ps, _ := r.obj(t)["policies"].([]any)
			for _, p := range ps {
				overHTTP = append(overHTTP, names[p.(map[string]any)["policy_id"].(string)])
			}
			for _, p := range g.GetPolicies() {
				overGRPC = append(overGRPC, names[p.GetPolicyId()])
			}
			slices.Sort(overHTTP)
			slices.Sort(overGRPC)
			if !slices.Equal(overHTTP, c.want) || !slices.Equal(overGRPC, c.want) {
				t.Errorf("HTTP %v, gRPC %v, want %v", overHTTP, overGRPC, c.want)
			}
		})
	}
	if r := e.call("GET", "/v1/admin/policies?tenant_id="+tenant+"&has_action_quotas=maybe", "", "", as...); r.status != 400 ||
		!strings.Contains(string(r.body), "has_action_quotas") {
		t.Errorf("has_action_quotas=maybe: %d %s, want 400 naming it", r.status, r.body)
	}
}
