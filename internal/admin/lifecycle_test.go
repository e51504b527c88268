package admin

import (
	"context"
	"reflect"
	"testing"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/test/redistest"
)

// Every admin script runs unchanged on real Redis and on the embedded store.
func TestLifecycleOnEveryBackend(t *testing.T) {
	for _, be := range redistest.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			e := newEnvFor(t, be, func(o *Options) { o.KeyCacheTTL = -1 })
			ctx := context.Background()
			id := e.createTenant()
			mustCall(t, e.ctx, &cyclesv1.UpdateTenantRequest{TenantId: id, Name: str("x"), Metadata: map[string]string{"a": "1"},
				Status: cyclesv1.TenantStatus_TENANT_STATUS_SUSPENDED}, e.svc.UpdateTenant)
			mustCall(t, e.ctx, &cyclesv1.UpdateTenantRequest{TenantId: id, Status: cyclesv1.TenantStatus_TENANT_STATUS_ACTIVE}, e.svc.UpdateTenant)
			if got := mustCall(t, e.ctx, &cyclesv1.GetTenantRequest{TenantId: id}, e.svc.GetTenant).GetTenant(); got.GetName() != "x" || got.GetMetadata()["a"] != "1" {
				t.Fatalf("tenant = %v", got)
			}
			k := e.createKey(id)
			if _, err := e.svc.VerifyAPIKey(ctx, k.GetSecret()); err != nil {
				t.Fatal(err)
			}
			mustCall(t, e.ctx, &cyclesv1.RevokeApiKeyRequest{TenantId: id, KeyId: k.GetApiKey().GetKeyId()}, e.svc.RevokeApiKey)
			if ks := e.listAllKeys(&cyclesv1.ListApiKeysRequest{TenantId: id, Status: cyclesv1.ApiKeyStatus_API_KEY_STATUS_REVOKED, Search: localKeyID(k.GetApiKey().GetKeyId())[:6]}); len(ks) != 1 || ks[0].GetKeyId() != k.GetApiKey().GetKeyId() {
				t.Fatalf("key list = %v", ks)
			}
			// Paged to the end: the registry is shared with other tests.
			if ts, _ := e.listAllTenants(&cyclesv1.ListTenantsRequest{Search: id, Limit: 100}); !reflect.DeepEqual(ts, []string{id}) {
				t.Fatalf("tenant list = %v", ts)
			}
			if _, err := e.svc.VerifyAPIKey(ctx, k.GetSecret()); err == nil {
				t.Fatal("revoked key verified")
			}
			sp := scopeOf(id, "agent:a")
			e.createBudget(id, "", tokens, 5)
			e.createBudget(id, "agent:a", tokens, 5)
			e.createBudget(id, "agent:a", credits, 5)
			got, _ := e.listAll(&cyclesv1.ListBudgetsRequest{TenantId: id, ScopePrefix: sp, Limit: 1})
			if !reflect.DeepEqual(got, []string{sp + "|CREDITS", sp + "|TOKENS"}) {
				t.Fatalf("list = %v", got)
			}
			mustCall(t, e.ctx, &cyclesv1.UpdateBudgetRequest{TenantId: id, ScopePath: sp, Unit: tokens, OverdraftLimit: i64(2),
				Caps: &cyclesv1.Caps{MaxTokens: i64(9)}, Metadata: map[string]string{"m": "n"}}, e.svc.UpdateBudget)
			mustCall(t, e.ctx, &cyclesv1.FreezeBudgetRequest{TenantId: id, ScopePath: sp, Unit: tokens}, e.svc.FreezeBudget)
			mustCall(t, e.ctx, &cyclesv1.UnfreezeBudgetRequest{TenantId: id, ScopePath: sp, Unit: tokens}, e.svc.UnfreezeBudget)
			b := mustCall(t, e.ctx, &cyclesv1.CloseBudgetRequest{TenantId: id, ScopePath: sp, Unit: tokens}, e.svc.CloseBudget).GetBudget()
			if b.GetStatus() != cyclesv1.BudgetStatus_BUDGET_STATUS_CLOSED || b.GetCaps().GetMaxTokens() != 9 || b.GetOverdraftLimit() != 2 || b.GetMetadata()["m"] != "n" {
				t.Fatalf("budget = %v", b)
			}
			mustCall(t, e.ctx, &cyclesv1.CloseTenantRequest{TenantId: id}, e.svc.CloseTenant)
			want := []string{"tenant.created", "tenant.suspended", "tenant.updated", "tenant.reactivated", "api_key.created", "api_key.revoked",
				"budget.created", "budget.created", "budget.created", "budget.updated", "budget.frozen", "budget.unfrozen", "budget.closed", "tenant.closed"}
			if got := eventTypes(e.events(id)); !reflect.DeepEqual(got, want) {
				t.Fatalf("events = %v", got)
			}
		})
	}
}
