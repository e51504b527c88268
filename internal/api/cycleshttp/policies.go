package cycleshttp

import (
	"time"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/policy"
)

// Scope policies (governance v0.1.25 Policy) over PolicyService, admin key
// only: POST/GET /v1/admin/policies, GET and PATCH
// /v1/admin/policies/{policy_id}. The tenant of a get or patch comes from the
// policy id when tenant_id is not in the query (docs/http-api.md).

var (
	policyStatusNames  = enumNames(cyclesv1.PolicyStatus(0).Descriptor())
	policyStatusValues = enumValues(policyStatusNames)
)

func (a *API) policyRoutes() []endpoint {
	pol, offPolicy := a.pol, off("the policy service is not enabled on this server")
	return []endpoint{
		on(a, "POST /v1/admin/policies", cyclesv1.PolicyService_CreateScopePolicy_FullMethodName,
			via(pol, cyclesv1.PolicyServiceServer.CreateScopePolicy), jsonBody((*policyIn).fillCreate),
			shaped[*cyclesv1.CreateScopePolicyResponse](policyShape.of("policy")), created, offPolicy),
		// tenant_id is required (admin key); has_action_quotas and
		// references_action_kind are the v0.1.26 filters.
		on(a, "GET /v1/admin/policies", cyclesv1.PolicyService_ListScopePolicies_FullMethodName,
			via(pol, cyclesv1.PolicyServiceServer.ListScopePolicies), check(tenantRequired),
			shaped[*cyclesv1.ListScopePoliciesResponse](page("policies", nil).nest("policies", policyShape)), offPolicy,
			query(q("tenant_id"), q("scope_pattern"), q("cursor"), q("status"), q("limit"),
				q("has_action_quotas"), q("references_action_kind"))),
		on(a, "GET /v1/admin/policies/{policy_id}", cyclesv1.PolicyService_GetScopePolicy_FullMethodName,
			via(pol, cyclesv1.PolicyServiceServer.GetScopePolicy), tenantFrom[*cyclesv1.GetScopePolicyRequest]("policy_id", policy.TenantOf, nil),
			shaped[*cyclesv1.GetScopePolicyResponse](policyShape.of("policy")), offPolicy, query(q("tenant_id"))),
		on(a, "PATCH /v1/admin/policies/{policy_id}", cyclesv1.PolicyService_UpdateScopePolicy_FullMethodName,
			via(pol, cyclesv1.PolicyServiceServer.UpdateScopePolicy), tenantFrom("policy_id", policy.TenantOf, jsonBody((*policyIn).fillUpdate)),
			shaped[*cyclesv1.UpdateScopePolicyResponse](policyShape.of("policy")), offPolicy, query(q("tenant_id"))),
	}
}

func tenantRequired(req *cyclesv1.ListScopePoliciesRequest) error {
	if req.TenantId == "" {
		return apierr.Invalid("tenant_id", "is required with the admin key")
	}
	return nil
}

// capsJSON is the protocol's Caps in a policy body.
type capsJSON struct {
	MaxTokens         *int64   `json:"max_tokens,omitempty"`
	MaxStepsRemaining *int64   `json:"max_steps_remaining,omitempty"`
	ToolAllowlist     []string `json:"tool_allowlist,omitempty"`
	ToolDenylist      []string `json:"tool_denylist,omitempty"`
	CooldownMs        *int64   `json:"cooldown_ms,omitempty"`
}

type ttlOverrideJSON struct {
	DefaultTTLMs  *int64 `json:"default_ttl_ms,omitempty"`
	MaxTTLMs      *int64 `json:"max_ttl_ms,omitempty"`
	MaxExtensions *int32 `json:"max_extensions,omitempty"`
}

type rateLimitsJSON struct {
	MaxReservationsPerMinute *int32 `json:"max_reservations_per_minute,omitempty"`
	MaxCommitsPerMinute      *int32 `json:"max_commits_per_minute,omitempty"`
}

func (c *capsJSON) proto() *cyclesv1.Caps {
	if c == nil {
		return nil
	}
	return &cyclesv1.Caps{MaxTokens: c.MaxTokens, MaxStepsRemaining: c.MaxStepsRemaining,
		ToolAllowlist: c.ToolAllowlist, ToolDenylist: c.ToolDenylist, CooldownMs: c.CooldownMs}
}

func (t *ttlOverrideJSON) proto() *cyclesv1.ReservationTtlOverride {
	if t == nil {
		return nil
	}
	return &cyclesv1.ReservationTtlOverride{DefaultTtlMs: t.DefaultTTLMs, MaxTtlMs: t.MaxTTLMs, MaxExtensions: t.MaxExtensions}
}

func (r *rateLimitsJSON) proto() *cyclesv1.PolicyRateLimits {
	if r == nil {
		return nil
	}
	return &cyclesv1.PolicyRateLimits{MaxReservationsPerMinute: r.MaxReservationsPerMinute, MaxCommitsPerMinute: r.MaxCommitsPerMinute}
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

// dateTime reads an optional ISO 8601 date-time body field as Unix ms.
func dateTime(field string, s *string) (*int64, error) {
	if s == nil {
		return nil, nil
	}
	if *s == "" {
		var zero int64
		return &zero, nil
	}
	t, err := time.Parse(time.RFC3339Nano, *s)
	if err != nil {
		return nil, apierr.Invalid(field, "must be an ISO 8601 date-time (e.g. 2026-01-02T15:04:05Z), got %q", *s)
	}
	ms := t.UnixMilli()
	return &ms, nil
}

func statusOf(field string, s *string) (cyclesv1.PolicyStatus, error) {
	if s == nil {
		return cyclesv1.PolicyStatus_POLICY_STATUS_UNSPECIFIED, nil
	}
	v, err := parseEnum(field, *s, policyStatusValues)
	return cyclesv1.PolicyStatus(v), err
}

type policyIn struct {
	TenantID               string           `json:"tenant_id"`
	Name                   *string          `json:"name"`
	Description            *string          `json:"description"`
	ScopePattern           string           `json:"scope_pattern"`
	Priority               *int32           `json:"priority"`
	Caps                   *capsJSON        `json:"caps"`
	CommitOveragePolicy    *string          `json:"commit_overage_policy"`
	ReservationTTLOverride *ttlOverrideJSON `json:"reservation_ttl_override"`
	RateLimits             *rateLimitsJSON  `json:"rate_limits"`
	Status                 *string          `json:"status"`
	EffectiveFrom          *string          `json:"effective_from"`
	EffectiveUntil         *string          `json:"effective_until"`
	governanceIn
}

// terms converts the fields create and patch share.
func (in *policyIn) terms() (pol cyclesv1.CommitOveragePolicy, st cyclesv1.PolicyStatus, from, until *int64, err error) {
	if pol, err = policyOf("commit_overage_policy", in.CommitOveragePolicy); err != nil {
		return
	}
	if st, err = statusOf("status", in.Status); err != nil {
		return
	}
	if from, err = dateTime("effective_from", in.EffectiveFrom); err != nil {
		return
	}
	until, err = dateTime("effective_until", in.EffectiveUntil)
	return
}

func (in *policyIn) fillCreate(out *cyclesv1.CreateScopePolicyRequest) error {
	if in.TenantID == "" {
		return apierr.Invalid("tenant_id", "is required with the admin key")
	}
	pol, st, from, until, err := in.terms()
	if err != nil {
		return err
	}
	out.TenantId, out.ScopePattern, out.Caps, out.CommitOveragePolicy = in.TenantID, in.ScopePattern, in.Caps.proto(), pol
	out.ReservationTtlOverride, out.RateLimits, out.Status = in.ReservationTTLOverride.proto(), in.RateLimits.proto(), st
	if in.Name != nil {
		out.Name = *in.Name
	}
	if in.Description != nil {
		out.Description = *in.Description
	}
	if in.Priority != nil {
		out.Priority = *in.Priority
	}
	if from != nil {
		out.EffectiveFromMs = *from
	}
	if until != nil {
		out.EffectiveUntilMs = *until
	}
	return in.governanceIn.create(out)
}

// fillUpdate: the policy (tenant, id) comes from the path and query.
func (in *policyIn) fillUpdate(out *cyclesv1.UpdateScopePolicyRequest) error {
	if in.TenantID != "" {
		return apierr.Invalid("tenant_id", "is not part of an update: the policy id names the tenant")
	}
	if in.ScopePattern != "" {
		return apierr.Invalid("scope_pattern", "cannot be changed; create a new policy")
	}
	pol, st, from, until, err := in.terms()
	if err != nil {
		return err
	}
	out.Name, out.Description, out.Priority, out.Caps, out.CommitOveragePolicy = in.Name, in.Description, in.Priority, in.Caps.proto(), pol
	out.ReservationTtlOverride, out.RateLimits, out.Status = in.ReservationTTLOverride.proto(), in.RateLimits.proto(), st
	out.EffectiveFromMs, out.EffectiveUntilMs = from, until
	return in.governanceIn.update(out)
}
