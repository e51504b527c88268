package cycleshttp_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/cyclesgo/cycles-go/test/ledgertest"
)

// TestPoliciesHTTP: policies created and patched over /v1/admin/policies
// (admin key) govern reserves made over /v1/reservations (tenant key), with
// the precedence of docs/protocol.md#policies.
func TestPoliciesHTTP(t *testing.T) {
	e := startFull(t)
	tenant := strings.ReplaceAll(ledgertest.NewTenantID(t), "_", "-")
	as := []string{"X-Admin-API-Key", adminKey}
	e.call("POST", "/v1/admin/tenants", "", `{"tenant_id":"`+tenant+`","name":"P"}`, as...).must(t, 201, "tenant")
	key := e.call("POST", "/v1/admin/api-keys", "", `{"tenant_id":"`+tenant+`","name":"k"}`, as...).must(t, 201, "key")["key_secret"].(string)
	for _, sp := range []string{"", "/workspace:prod", "/workspace:prod/agent:bot"} {
		e.call("POST", "/v1/admin/budgets", "", `{"tenant_id":"`+tenant+`","scope":"tenant:`+tenant+sp+`","unit":"TOKENS","allocated":{"unit":"TOKENS","amount":100000}}`, as...).must(t, 201, "budget")
	}

	create := func(body string) map[string]any {
		t.Helper()
		return e.call("POST", "/v1/admin/policies", "", `{"tenant_id":"`+tenant+`",`+body+`}`, as...).must(t, 201, "create policy "+body)
	}
	low := create(`"name":"low","scope_pattern":"tenant:` + tenant + `/*","priority":1,"caps":{"max_tokens":100},
		"commit_overage_policy":"REJECT","reservation_ttl_override":{"default_ttl_ms":20000}`)
	onlyKeys(t, "policy", low, "policy_id", "name", "scope_pattern", "priority", "caps", "commit_overage_policy",
		"reservation_ttl_override", "status", "created_at",
		// v0.1.26: returned as empty lists, never omitted (governance extensions).
		"action_quotas", "risk_class_quotas", "allowed_action_kinds", "denied_action_kinds")
	high := create(`"name":"high","scope_pattern":"agent:bot","priority":7,"caps":{"max_tokens":7},"effective_from":"2020-01-01T00:00:00Z"`)

	n := 0
	reserve := func(subject string) map[string]any {
		t.Helper()
		n++
		body := `{"idempotency_key":"h-` + itoa(int64(n)) + `","subject":` + subject + `,"action":{"kind":"llm","name":"m"},"estimate":{"unit":"TOKENS","amount":5}}`
		return e.call("POST", "/v1/reservations", "", body, "X-Cycles-API-Key", key).must(t, 200, "reserve "+subject)
	}
	cases := []struct {
		name, subject, maxTokens, policy string
		ttl                              json.Number
		patch                            map[string]string // policy -> PATCH body before the reserve
	}{
		{name: "agent: the higher-priority caps, the lower one's overage and TTL", subject: `{"workspace":"prod","agent":"bot"}`,
			maxTokens: "7", policy: "REJECT", ttl: "20000"},
		{name: "workspace: only the descendant policy", subject: `{"workspace":"prod"}`, maxTokens: "100", policy: "REJECT", ttl: "20000"},
		{name: "tenant itself: no policy", subject: `{"tenant":"` + tenant + `"}`, policy: "ALLOW_IF_AVAILABLE", ttl: "60000"},
		{name: "high disabled", subject: `{"workspace":"prod","agent":"bot"}`, maxTokens: "100", policy: "REJECT", ttl: "20000",
			patch: map[string]string{high["policy_id"].(string): `{"status":"DISABLED"}`}},
		{name: "low out of its window", subject: `{"workspace":"prod","agent":"bot"}`, policy: "ALLOW_IF_AVAILABLE", ttl: "60000",
			patch: map[string]string{low["policy_id"].(string): `{"effective_until":"2021-01-01T00:00:00Z"}`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for id, body := range c.patch {
				e.call("PATCH", "/v1/admin/policies/"+id, "", body, as...).must(t, 200, "patch")
			}
			r := reserve(c.subject)
			caps, _ := r["caps"].(map[string]any)
			if c.maxTokens == "" && caps != nil || c.maxTokens != "" && (caps == nil || caps["max_tokens"] != json.Number(c.maxTokens)) {
				t.Errorf("caps %v, want max_tokens %q", r["caps"], c.maxTokens)
			}
			if r["remaining_ttl_ms"] != c.ttl {
				t.Errorf("remaining_ttl_ms %v, want %s", r["remaining_ttl_ms"], c.ttl)
			}
			// The overage policy shows at commit: 6 used on an estimate of 5.
			cr := e.call("POST", "/v1/reservations/"+r["reservation_id"].(string)+"/commit", "",
				`{"idempotency_key":"c-`+itoa(int64(n))+`","actual":{"unit":"TOKENS","amount":6}}`, "X-Cycles-API-Key", key)
			if wantStatus := map[string]int{"REJECT": 409, "ALLOW_IF_AVAILABLE": 200}[c.policy]; cr.status != wantStatus {
				t.Errorf("commit above the estimate under %s: %d %s, want %d", c.policy, cr.status, cr.body, wantStatus)
			}
		})
	}

	got := e.call("GET", "/v1/admin/policies/"+high["policy_id"].(string), "", "", as...).must(t, 200, "get")
	if got["status"] != "DISABLED" || got["updated_at"] == nil || got["effective_from"] != "2020-01-01T00:00:00.000Z" {
		t.Fatalf("get %v", got)
	}
	l := e.call("GET", "/v1/admin/policies?tenant_id="+tenant+"&status=ACTIVE", "", "", as...).must(t, 200, "list")
	if ps := l["policies"].([]any); len(ps) != 1 || ps[0].(map[string]any)["name"] != "low" {
		t.Fatalf("list %v", l)
	}
	for _, c := range []struct {
		method, path, body string
		status             int
	}{
		{"POST", "/v1/admin/policies", `{"tenant_id":"` + tenant + `","name":"low","scope_pattern":"*"}`, 409},
		{"POST", "/v1/admin/policies", `{"name":"x","scope_pattern":"*"}`, 400},
		{"POST", "/v1/admin/policies", `{"tenant_id":"` + tenant + `","name":"x","scope_pattern":"tenant:other"}`, 400},
		{"POST", "/v1/admin/policies", `{"tenant_id":"` + tenant + `","name":"x","scope_pattern":"*","priority":-1}`, 400},
		{"PATCH", "/v1/admin/policies/" + low["policy_id"].(string), `{"scope_pattern":"*"}`, 400},
		{"GET", "/v1/admin/policies/pol_" + tenant + "_00000000000000000000000000000000", "", 404},
		{"GET", "/v1/admin/policies", "", 400},
	} {
		if r := e.call(c.method, c.path, "", c.body, as...); r.status != c.status {
			t.Errorf("%s %s %s: %d %s, want %d", c.method, c.path, c.body, r.status, r.body, c.status)
		}
	}
	if r := e.call("GET", "/v1/admin/policies?tenant_id="+tenant, "", "", "X-Cycles-API-Key", key); r.status != 401 {
		t.Fatalf("list with a tenant key: %d %s", r.status, r.body)
	}
}
