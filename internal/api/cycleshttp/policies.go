package cycleshttp

import (
	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
)

// Scope policies (governance v0.1.25 Policy) over PolicyService, admin key
// only: POST/GET /v1/admin/policies, GET and PATCH
// /v1/admin/policies/{policy_id}. The tenant of a get or patch comes from the
// policy id when tenant_id is not in the query (docs/http-api.md).

func tenantRequired(req *cyclesv1.ListScopePoliciesRequest) error {
	if req.TenantId == "" {
		return apierr.Invalid("tenant_id", "is required with the admin key")
	}
	return nil
}

// policyShape is the spec's Policy with the v0.1.26 governance lists,
// which are always present (the spec: empty lists, never omitted).
var policyShape = shapeOf("policy_id", "name?", "description?", "scope_pattern", "priority", "caps?", "commit_overage_policy?",
	"reservation_ttl_override?", "rate_limits?", "status", "effective_from?", "effective_until?", "created_at", "updated_at?",
	"action_quotas", "risk_class_quotas", "allowed_action_kinds", "denied_action_kinds").
	nest("caps", capsShape).
	nest("reservation_ttl_override", shapeOf("default_ttl_ms?", "max_ttl_ms?", "max_extensions?")).
	nest("rate_limits", shapeOf("max_reservations_per_minute?", "max_commits_per_minute?")).
	nest("action_quotas", shapeOf("action_kind", "max_calls", "window", "host_allowlist?", "recipient_domain_allowlist?",
		"resource_type_allowlist?", "per_run_counter_ttl_ms?", "threshold_pct?")).
	nest("risk_class_quotas", shapeOf("risk_class", "max_calls", "window", "per_run_counter_ttl_ms?", "threshold_pct?"))
