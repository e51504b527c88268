package cycleshttp

import (
	"context"
	"net/http"
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
	policyStatusNames  = enumNames(cyclesv1.PolicyStatus_name, "POLICY_STATUS_")
	policyStatusValues = enumValues(policyStatusNames)
)

func (a *API) policyRoutes() {
	a.mux.HandleFunc("POST /v1/admin/policies", a.createPolicy)
	a.mux.HandleFunc("GET /v1/admin/policies", a.listPolicies)
	a.mux.HandleFunc("GET /v1/admin/policies/{policy_id}", a.getPolicy)
	a.mux.HandleFunc("PATCH /v1/admin/policies/{policy_id}", a.updatePolicy)
}

func (a *API) policyCall(w http.ResponseWriter, r *http.Request, method string, ok int, req any, decodeErr error,
	call func(ctx context.Context, req any) (any, error), render func(resp any) any) {
	if a.pol == nil {
		a.notServed(w, r, "the policy service is not enabled on this server")
		return
	}
	a.serve(w, r, route{method, adminPlane, ok}, req, decodeErr, call, render)
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

type capsIn struct {
	MaxTokens         *int64   `json:"max_tokens"`
	MaxStepsRemaining *int64   `json:"max_steps_remaining"`
	ToolAllowlist     []string `json:"tool_allowlist"`
	ToolDenylist      []string `json:"tool_denylist"`
	CooldownMs        *int64   `json:"cooldown_ms"`
}

func (c *capsIn) proto() *cyclesv1.Caps {
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

type policyOut struct {
	PolicyID               string           `json:"policy_id"`
	Name                   string           `json:"name,omitempty"`
	Description            string           `json:"description,omitempty"`
	ScopePattern           string           `json:"scope_pattern"`
	Priority               int32            `json:"priority"`
	Caps                   *capsOut         `json:"caps,omitempty"`
	CommitOveragePolicy    string           `json:"commit_overage_policy,omitempty"`
	ReservationTTLOverride *ttlOverrideJSON `json:"reservation_ttl_override,omitempty"`
	RateLimits             *rateLimitsJSON  `json:"rate_limits,omitempty"`
	Status                 string           `json:"status"`
	EffectiveFrom          string           `json:"effective_from,omitempty"`
	EffectiveUntil         string           `json:"effective_until,omitempty"`
	CreatedAt              string           `json:"created_at"`
	UpdatedAt              string           `json:"updated_at,omitempty"`
	governanceOut
}

func policyOutOf(p *cyclesv1.ScopePolicy) *policyOut {
	out := &policyOut{PolicyID: p.GetPolicyId(), Name: p.GetName(), Description: p.GetDescription(),
		ScopePattern: p.GetScopePattern(), Priority: p.GetPriority(), Caps: capsOf(p.GetCaps()),
		CommitOveragePolicy: policyNames[int32(p.GetCommitOveragePolicy())],
		Status:              policyStatusNames[int32(p.GetStatus())],
		EffectiveFrom:       isoTime(p.GetEffectiveFromMs()), EffectiveUntil: isoTime(p.GetEffectiveUntilMs()),
		CreatedAt: isoTime(p.GetCreatedAtMs()), UpdatedAt: isoTime(p.GetUpdatedAtMs()), governanceOut: governanceOf(p)}
	if t := p.GetReservationTtlOverride(); t != nil {
		out.ReservationTTLOverride = &ttlOverrideJSON{DefaultTTLMs: t.DefaultTtlMs, MaxTTLMs: t.MaxTtlMs, MaxExtensions: t.MaxExtensions}
	}
	if r := p.GetRateLimits(); r != nil {
		out.RateLimits = &rateLimitsJSON{MaxReservationsPerMinute: r.MaxReservationsPerMinute, MaxCommitsPerMinute: r.MaxCommitsPerMinute}
	}
	return out
}

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
	Caps                   *capsIn          `json:"caps"`
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

func (a *API) createPolicy(w http.ResponseWriter, r *http.Request) {
	var in policyIn
	req, err := decodeInto(a, w, r, &in, func() (*cyclesv1.CreateScopePolicyRequest, error) {
		if in.TenantID == "" {
			return nil, apierr.Invalid("tenant_id", "is required with the admin key")
		}
		pol, st, from, until, err := in.terms()
		if err != nil {
			return nil, err
		}
		out := &cyclesv1.CreateScopePolicyRequest{TenantId: in.TenantID, ScopePattern: in.ScopePattern,
			Caps: in.Caps.proto(), CommitOveragePolicy: pol, ReservationTtlOverride: in.ReservationTTLOverride.proto(),
			RateLimits: in.RateLimits.proto(), Status: st}
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
		if err := in.governanceIn.create(out); err != nil {
			return nil, err
		}
		return out, nil
	})
	a.policyCall(w, r, cyclesv1.PolicyService_CreateScopePolicy_FullMethodName, http.StatusCreated, req, err,
		func(ctx context.Context, req any) (any, error) {
			return a.pol.CreateScopePolicy(ctx, req.(*cyclesv1.CreateScopePolicyRequest))
		},
		func(resp any) any { return policyOutOf(resp.(*cyclesv1.CreateScopePolicyResponse).GetPolicy()) })
}

type policiesOut struct {
	Policies   []*policyOut `json:"policies"`
	NextCursor string       `json:"next_cursor,omitempty"`
	HasMore    bool         `json:"has_more"`
}

// listPolicies serves GET /v1/admin/policies: tenant_id is required (admin
// key); scope_pattern, status, limit and cursor filter and page. The v0.1.26
// filters (has_action_quotas, references_action_kind) are ignored, as the
// spec allows a server without those extensions.
func (a *API) listPolicies(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	req := &cyclesv1.ListScopePoliciesRequest{TenantId: q.Get("tenant_id"), ScopePattern: q.Get("scope_pattern"), Cursor: q.Get("cursor")}
	var err error
	if req.TenantId == "" {
		err = apierr.Invalid("tenant_id", "is required with the admin key")
	}
	if s := q.Get("status"); s != "" && err == nil {
		var v int32
		if v, err = parseEnum("status", s, policyStatusValues); err == nil {
			req.Status = cyclesv1.PolicyStatus(v)
		}
	}
	if err == nil {
		req.Limit, err = limitParam(q)
	}
	a.policyCall(w, r, cyclesv1.PolicyService_ListScopePolicies_FullMethodName, http.StatusOK, req, err,
		func(ctx context.Context, req any) (any, error) {
			return a.pol.ListScopePolicies(ctx, req.(*cyclesv1.ListScopePoliciesRequest))
		},
		func(resp any) any {
			l := resp.(*cyclesv1.ListScopePoliciesResponse)
			out := &policiesOut{Policies: make([]*policyOut, 0, len(l.GetPolicies())), NextCursor: l.GetNextCursor(), HasMore: l.GetHasMore()}
			for _, p := range l.GetPolicies() {
				out.Policies = append(out.Policies, policyOutOf(p))
			}
			return out
		})
}

// policyTenant is the tenant of a policy route: the tenant_id query
// parameter, else the tenant the id names.
func policyTenant(r *http.Request) string {
	if t := r.URL.Query().Get("tenant_id"); t != "" {
		return t
	}
	return policy.TenantOf(r.PathValue("policy_id"))
}

func (a *API) getPolicy(w http.ResponseWriter, r *http.Request) {
	req := &cyclesv1.GetScopePolicyRequest{TenantId: policyTenant(r), PolicyId: r.PathValue("policy_id")}
	a.policyCall(w, r, cyclesv1.PolicyService_GetScopePolicy_FullMethodName, http.StatusOK, req, nil,
		func(ctx context.Context, req any) (any, error) {
			return a.pol.GetScopePolicy(ctx, req.(*cyclesv1.GetScopePolicyRequest))
		},
		func(resp any) any { return policyOutOf(resp.(*cyclesv1.GetScopePolicyResponse).GetPolicy()) })
}

func (a *API) updatePolicy(w http.ResponseWriter, r *http.Request) {
	var in policyIn
	req, err := decodeInto(a, w, r, &in, func() (*cyclesv1.UpdateScopePolicyRequest, error) {
		if in.TenantID != "" {
			return nil, apierr.Invalid("tenant_id", "is not part of an update: the policy id names the tenant")
		}
		if in.ScopePattern != "" {
			return nil, apierr.Invalid("scope_pattern", "cannot be changed; create a new policy")
		}
		pol, st, from, until, err := in.terms()
		if err != nil {
			return nil, err
		}
		out := &cyclesv1.UpdateScopePolicyRequest{TenantId: policyTenant(r), PolicyId: r.PathValue("policy_id"),
			Name: in.Name, Description: in.Description, Priority: in.Priority, Caps: in.Caps.proto(),
			CommitOveragePolicy: pol, ReservationTtlOverride: in.ReservationTTLOverride.proto(),
			RateLimits: in.RateLimits.proto(), Status: st, EffectiveFromMs: from, EffectiveUntilMs: until}
		if err := in.governanceIn.update(out); err != nil {
			return nil, err
		}
		return out, nil
	})
	a.policyCall(w, r, cyclesv1.PolicyService_UpdateScopePolicy_FullMethodName, http.StatusOK, req, err,
		func(ctx context.Context, req any) (any, error) {
			return a.pol.UpdateScopePolicy(ctx, req.(*cyclesv1.UpdateScopePolicyRequest))
		},
		func(resp any) any { return policyOutOf(resp.(*cyclesv1.UpdateScopePolicyResponse).GetPolicy()) })
}
