package admin

import (
	"context"

	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
)

// ownTenant confines a tenant API key to its own tenant on the budget calls
// the governance spec opens to tenant keys (CreateBudget, GetBudget,
// ListBudgets, FundBudget; their access rule is CALLER_EITHER): it returns
// the tenant the call acts on, the key's own, and refuses another one named
// in tenant_id with FORBIDDEN. The admin key (and an in-process caller without
// a principal) acts on the tenant it names. The scope is then resolved inside
// that tenant (resolveBudget), so a scope of another tenant cannot be reached.
func ownTenant(ctx context.Context, named string) (string, error) {
	p, ok := auth.FromContext(ctx)
	if !ok || p.Admin || p.Tenant == "" {
		return named, nil
	}
	if named != "" && named != p.Tenant {
		return "", apierr.New(apierr.Forbidden, "a tenant API key acts only on its own tenant %s", p.Tenant).With("tenant_id", named)
	}
	return p.Tenant, nil
}
