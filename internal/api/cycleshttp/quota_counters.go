package cycleshttp

import (
	"net/http"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
)

// The v0.1.26 action-quota counters over QuotaCounterService: GET (the
// admin key, or a tenant key with action_quotas:read or the deprecated
// balances:read, on its own tenant) and POST (admin key only):
// GET /v1/admin/action-quota-counters (tenant_id required; scope,
// action_kind, window, run_id, include_zero, limit, cursor) and POST
// /v1/admin/action-quota-counters/reset (ActionQuotaCounterResetRequest).

// keyTenant: without tenant_id, a tenant key lists its own tenant's counters
// (the key names it; the chain proves the key and the service confines it to
// that tenant); the admin key must name the tenant.
func keyTenant(_ *API, _ http.ResponseWriter, r *http.Request, req *cyclesv1.ListActionQuotaCountersRequest) error {
	if req.TenantId != "" {
		return nil
	}
	k, ok := auth.ParseAPIKey(r.Header.Get("X-Cycles-API-Key"))
	if !ok {
		return apierr.Invalid("tenant_id", "is required with the admin key")
	}
	req.TenantId = k.Tenant
	return nil
}

// quotaState is a quota counter on the wire; scope_path repeats scope (the
// spec names both).
var quotaState = shapeOf("action_kind", "risk_class?", "scope", "scope_path=scope", "window", "window_key", "used", "limit",
	"remaining", "policy_id?", "expires_at?", "last_incremented_at?")
