package auth

import (
	"context"

	"github.com/cyclesgo/cycles-go/internal/apierr"
)

// OwnTenant confines a tenant API key to its own tenant on the calls whose
// access rule (CALLER_EITHER) opens an admin-plane read or write to tenant
// keys: it returns the tenant the call acts on, the key's own, and refuses
// another one named in tenant_id with FORBIDDEN. The admin key (and an
// in-process caller without a principal) acts on the tenant it names.
func OwnTenant(ctx context.Context, named string) (string, error) {
	p, ok := FromContext(ctx)
	if !ok || p.Admin || p.Tenant == "" {
		return named, nil
	}
	if named != "" && named != p.Tenant {
		return "", apierr.New(apierr.Forbidden, "a tenant API key acts only on its own tenant %s", p.Tenant).With("tenant_id", named)
	}
	return p.Tenant, nil
}
