package cycleshttp_test

import (
	"fmt"
	"strings"
	"testing"
)

// TestQuotaCountersHTTP: GET /v1/admin/action-quota-counters and POST
// /v1/admin/action-quota-counters/reset (admin key), over QuotaCounterService.
func TestQuotaCountersHTTP(t *testing.T) {
	e := startFull(t)
	f := e.v026Fixture(t, false)
	c := v026Case{id: "counters", kind: "message.email.send", counted: 2,
		policy: `"action_quotas":[{"action_kind":"message.email.send","max_calls":5,"window":"per_run"}]`}
	e.v026State(t, f, &c)
	as := []string{"X-Admin-API-Key", adminKey}
	r := e.call("GET", "/v1/admin/action-quota-counters?tenant_id="+f.tenant+"&window=per_run", "", "", as...)
	if r.status != 200 {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	m := r.obj(t)
	cs, _ := m["counters"].([]any)
	if len(cs) != 1 || m["has_more"] != false {
		t.Fatalf("list: %s", r.body)
	}
	c0 := cs[0].(map[string]any)
	if c0["scope"] != f.agentScope || fmt.Sprintf("%v %v %v", c0["used"], c0["limit"], c0["remaining"]) != "2 5 3" ||
		c0["window"] != "per_run" || c0["window_key"] != "run-abc-123" || c0["action_kind"] != "message.email.send" {
		t.Fatalf("counter: %s", r.body)
	}
	// Tenant keys (v0.1.26 PERMISSION MODEL): action_quotas:read, or the
	// deprecated balances:read with X-Cycles-Permission-Deprecated; own
	// tenant only (implied when tenant_id is absent); the reset stays admin.
	key := func(perms string) string {
		r := e.call("POST", "/v1/admin/api-keys", "", `{"tenant_id":"`+f.tenant+`","name":"q","permissions":[`+perms+`]}`, as...)
		if r.status != 201 {
			t.Fatalf("key %s: %d %s", perms, r.status, r.body)
		}
		return r.obj(t)["key_secret"].(string)
	}
	quotaKey, otherKey := key(`"action_quotas:read"`), key(`"reservations:create"`)
	for _, c := range []struct {
		name, secret, query string
		status              int
		deprecated          string
	}{
		{"action_quotas:read", quotaKey, "", 200, ""},
		{"action_quotas:read naming its tenant", quotaKey, "?tenant_id=" + f.tenant, 200, ""},
		{"balances:read (deprecated)", f.secret, "", 200, "balances:read"},
		{"neither permission", otherKey, "", 403, ""},
		{"another tenant", quotaKey, "?tenant_id=someone-else", 403, ""},
	} {
		r := e.call("GET", "/v1/admin/action-quota-counters"+c.query, "", "", "X-Cycles-API-Key", c.secret)
		if r.status != c.status || r.header.Get("X-Cycles-Permission-Deprecated") != c.deprecated {
			t.Fatalf("%s: %d %q %s", c.name, r.status, r.header.Get("X-Cycles-Permission-Deprecated"), r.body)
		}
		if cs, _ := r.obj(t)["counters"].([]any); c.status == 200 && len(cs) != 1 {
			t.Fatalf("%s: %s", c.name, r.body)
		}
	}
	if r := e.call("POST", "/v1/admin/action-quota-counters/reset", "", `{"tenant_id":"`+f.tenant+`"}`, "X-Cycles-API-Key", quotaKey); r.status != 401 && r.status != 403 {
		t.Fatalf("reset with a tenant key: %d %s", r.status, r.body)
	}
	if r := e.call("GET", "/v1/admin/action-quota-counters", "", "", as...); r.status != 400 {
		t.Fatalf("admin key without tenant_id: %d %s", r.status, r.body)
	}
	body := `{"tenant_id":"` + f.tenant + `","scope":"` + f.agentScope + `","action_kind":"message.email.send","window":"per_run","window_key":"run-abc-123","reason":"test"}`
	r = e.call("POST", "/v1/admin/action-quota-counters/reset", "", body, as...)
	if r.status != 200 || !strings.Contains(string(r.body), `"previous_used":2`) || !strings.Contains(string(r.body), `"used":0`) {
		t.Fatalf("reset: %d %s", r.status, r.body)
	}
	// The reset counter is at 0: listed only with include_zero; run_id and
	// scope (the tenant: everything below it) filter.
	for _, c := range []struct {
		query  string
		status int
		n      int
	}{
		{"&run_id=run-abc-123", 200, 0},
		{"&run_id=run-abc-123&include_zero=true", 200, 1},
		{"&run_id=other&include_zero=true", 200, 0},
		{"&include_zero=true&scope=tenant:" + f.tenant, 200, 1},
		{"&include_zero=yes", 400, 0},
	} {
		r := e.call("GET", "/v1/admin/action-quota-counters?tenant_id="+f.tenant+c.query, "", "", as...)
		if r.status != c.status {
			t.Fatalf("%s: %d %s", c.query, r.status, r.body)
		}
		if cs, _ := r.obj(t)["counters"].([]any); c.status == 200 && len(cs) != c.n {
			t.Fatalf("%s: %d counters, want %d: %s", c.query, len(cs), c.n, r.body)
		}
	}
	r = e.call("POST", "/v1/admin/action-quota-counters/reset", "", strings.Replace(body, `"tenant_id":"`+f.tenant+`",`, "", 1), as...)
	if r.status != 400 || !strings.Contains(string(r.body), "tenant_id") {
		t.Fatalf("reset without tenant_id: %d %s", r.status, r.body)
	}
	r = e.call("POST", "/v1/admin/action-quota-counters/reset", "", strings.Replace(body, "run-abc-123", "run-none", 1), as...)
	if r.status != 404 {
		t.Fatalf("reset of no counter: %d %s", r.status, r.body)
	}
}
