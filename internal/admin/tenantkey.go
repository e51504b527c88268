package admin

import (
	"context"

	"github.com/cyclesgo/cycles-go/internal/auth"
)

// ownTenant confines a tenant API key to its own tenant on the budget calls
// the governance spec opens to tenant keys (CreateBudget, GetBudget,
// ListBudgets, FundBudget; their access rule is CALLER_EITHER): it sets
// *tenantID, the request's tenant_id, to the tenant the call acts on, the
// key's own, and refuses another one named there with FORBIDDEN. The admin
// key (and an in-process caller without a principal) acts on the tenant it
// names. The scope is then resolved inside that tenant (resolveBudget), so a
// scope of another tenant cannot be reached.
func ownTenant(ctx context.Context, tenantID *string) error {
	tenant, err := auth.OwnTenant(ctx, *tenantID)
	if err != nil {
		return err
	}
	*tenantID = tenant
	return nil
}
