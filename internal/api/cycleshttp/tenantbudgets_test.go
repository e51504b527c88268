package cycleshttp_test

import (
	"strings"
	"testing"

	"github.com/cyclesgo/cycles-go/test/ledgertest"
)

// The budget routes the governance spec opens to tenant keys (create, list,
// lookup, fund) take one, confined to its own tenant and to the permission
// each needs; the admin-only ones still refuse it.
func TestTenantKeyBudgetRoutes(t *testing.T) {
	e := startFull(t)
	as := []string{"X-Admin-API-Key", adminKey}
	mk := func() string {
		tn := strings.ReplaceAll(ledgertest.NewTenantID(t), "_", "-")
		if r := e.call("POST", "/v1/admin/tenants", "", `{"tenant_id":"`+tn+`","name":"T"}`, as...); r.status != 201 {
			t.Fatalf("tenant: %d %s", r.status, r.body)
		}
		return tn
	}
	own, other := mk(), mk()
	key := func(perms string) []string {
		r := e.call("POST", "/v1/admin/api-keys", "", `{"tenant_id":"`+own+`","name":"k","permissions":`+perms+`}`, as...)
		if r.status != 201 {
			t.Fatalf("key: %d %s", r.status, r.body)
		}
		return []string{"X-Cycles-API-Key", r.obj(t)["key_secret"].(string)}
	}
	rw, ro, none := key(`["budgets:read","budgets:write"]`), key(`["budgets:read"]`), key(`["balances:read"]`)
	if r := e.call("POST", "/v1/admin/budgets", "", `{"scope":"tenant:`+other+`","unit":"TOKENS","allocated":{"unit":"TOKENS","amount":10}}`, as...); r.status != 201 {
		t.Fatalf("other's budget: %d %s", r.status, r.body)
	}
	create := func(tn string) string {
		return `{"scope":"tenant:` + tn + `/workspace:w","unit":"TOKENS","allocated":{"unit":"TOKENS","amount":1000}}`
	}
	fund := `{"operation":"CREDIT","amount":{"unit":"TOKENS","amount":5},"idempotency_key":"f1"}`
	for _, c := range []struct {
		name, method, path, body string
		cred                     []string
		status                   int
		errCode                  string
	}{
		{"create own", "POST", "/v1/admin/budgets", create(own), rw, 201, ""},
		{"list own, tenant implied", "GET", "/v1/admin/budgets", "", ro, 200, ""},
		{"list own, named", "GET", "/v1/admin/budgets?tenant_id=" + own, "", ro, 200, ""},
		{"lookup own", "GET", "/v1/admin/budgets/lookup?scope=tenant:" + own + "/workspace:w&unit=TOKENS", "", ro, 200, ""},
		{"fund own", "POST", "/v1/admin/budgets/fund?scope=tenant:" + own + "/workspace:w&unit=TOKENS", fund, rw, 200, ""},
		{"create in another tenant", "POST", "/v1/admin/budgets", create(other), rw, 403, "FORBIDDEN"},
		{"list another tenant", "GET", "/v1/admin/budgets?tenant_id=" + other, "", ro, 403, "FORBIDDEN"},
		{"lookup another tenant", "GET", "/v1/admin/budgets/lookup?scope=tenant:" + other + "&unit=TOKENS", "", ro, 403, "FORBIDDEN"},
		{"fund another tenant", "POST", "/v1/admin/budgets/fund?scope=tenant:" + other + "&unit=TOKENS", fund, rw, 403, "FORBIDDEN"},
		{"create without budgets:write", "POST", "/v1/admin/budgets", create(own), ro, 403, "FORBIDDEN"},
		{"list without budgets:read", "GET", "/v1/admin/budgets", "", none, 403, "FORBIDDEN"},
		{"freeze stays admin-only", "POST", "/v1/admin/budgets/freeze?scope=tenant:" + own + "/workspace:w&unit=TOKENS", "", rw, 401, ""},
		{"patch stays admin-only", "PATCH", "/v1/admin/budgets?scope=tenant:" + own + "/workspace:w&unit=TOKENS", `{"commit_overage_policy":"REJECT"}`, rw, 401, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := e.call(c.method, c.path, "", c.body, c.cred...)
			if r.status != c.status || c.errCode != "" && r.obj(t)["error"] != c.errCode {
				t.Fatalf("%s %s: %d %s, want %d %s", c.method, c.path, r.status, r.body, c.status, c.errCode)
			}
		})
	}
	// The listing shows the key's own tenant only.
	l := e.call("GET", "/v1/admin/budgets", "", "", ro...).obj(t)
	ls, _ := l["ledgers"].([]any)
	if len(ls) == 0 {
		t.Fatalf("the key's own budget is not listed: %v", l)
	}
	for _, b := range ls {
		if s := b.(map[string]any)["scope"].(string); !strings.HasPrefix(s, "tenant:"+own) {
			t.Fatalf("listed another tenant's budget %s", s)
		}
	}
}
