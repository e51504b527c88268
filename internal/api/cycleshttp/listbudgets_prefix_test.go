package cycleshttp_test

import (
	"fmt"
	"net/url"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
)

// ListBudgets with scope_prefix and no tenant_id lists the tenant the prefix
// names, on both wires and for both kinds of caller: a tenant key for its
// own tenant (another tenant's prefix is FORBIDDEN), the admin key for any.
// A prefix that names no tenant still needs tenant_id.
func TestListBudgetsScopePrefixWithoutTenant(t *testing.T) {
	k := newKeysEnv(t)
	other := newKeysEnv(t)
	secret, _ := k.key(`,"permissions":["budgets:read"]`)
	k.must("POST", "/v1/admin/budgets", `{"scope":"tenant:`+k.tenant+`/workspace:w","unit":"TOKENS","allocated":{"unit":"TOKENS","amount":5}}`, 201)
	own, theirs := "tenant:"+k.tenant+"/workspace:w", "tenant:"+other.tenant

	for _, c := range []struct {
		name   string
		admin  bool
		prefix string
		want   int    // budgets listed
		code   string // refusal (HTTP error)
	}{
		{"tenant key, own prefix", false, own, 1, ""},
		{"tenant key, own tenant root", false, "tenant:" + k.tenant, 2, ""},
		{"tenant key, another tenant's prefix", false, theirs, 0, "FORBIDDEN"},
		{"admin key, a tenant's prefix", true, own, 1, ""},
		{"prefix naming no tenant", true, "workspace:w", 0, "INVALID_REQUEST"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cred, ctx := []string{"X-Cycles-API-Key", secret}, keyCtx(secret)
			if c.admin {
				cred, ctx = k.as, adminCtx()
			}
			r := k.call("GET", "/v1/admin/budgets?scope_prefix="+url.QueryEscape(c.prefix), "", "", cred...)
			g, err := k.adm.ListBudgets(ctx, &cyclesv1.ListBudgetsRequest{ScopePrefix: c.prefix})
			if c.code != "" {
				if r.status < 400 || r.obj(t)["error"] != c.code {
					t.Errorf("HTTP: %d %s, want %s", r.status, r.body, c.code)
				}
				want := map[string]codes.Code{"FORBIDDEN": codes.PermissionDenied, "INVALID_REQUEST": codes.InvalidArgument}[c.code]
				if status.Code(err) != want {
					t.Errorf("gRPC: %v, want %v", err, want)
				}
				return
			}
			if r.status != 200 || len(r.obj(t)["ledgers"].([]any)) != c.want {
				t.Errorf("HTTP: %d %s, want %d budgets", r.status, r.body, c.want)
			}
			if err != nil || len(g.GetBudgets()) != c.want {
				t.Errorf("gRPC: %v %s, want %d budgets", err, fmt.Sprint(g.GetBudgets()), c.want)
			}
		})
	}
}
