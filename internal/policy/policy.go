// Package policy is the scope-policy store of cyclesd (PolicyService,
// governance v0.1.25 Policy): caps, TTL governance and an overage default for
// every scope a pattern matches. Each mutation is one Lua script
// (lua/policy/*) that writes the policy into the tenant's policies hash and
// rebuilds the compiled copy of the ACTIVE policies in the tenant record in
// the same run; the ledger's reserve, decide and event scripts apply that
// copy atomically with the budgets (lua/lib/policy.lua,
// docs/protocol.md#policies). Go only validates, compiles scope patterns and
// converts between protobuf and the stored JSON.
package policy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/actionkind"
	"github.com/cyclesgo/cycles-go/internal/admin"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/defaults"
	"github.com/cyclesgo/cycles-go/internal/eventctx"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/scope"
	"github.com/cyclesgo/cycles-go/internal/script"
)

// MaxPerTenant is the default bound on one tenant's policies: every reserve
// of the tenant evaluates its ACTIVE ones, and every mutation reads them all.
const MaxPerTenant = 64

// List bounds.
const (
	DefaultListLimit = 50
	MaxListLimit     = 200
)

// Options configure a Service.
type Options struct {
	// MaxPerTenant bounds one tenant's policies (0 = MaxPerTenant).
	MaxPerTenant int
	// Kinds is the action-kind registry: a policy naming an undeclared
	// custom.* kind is refused (nil: no custom kind is checked).
	Kinds *actionkind.Registry
}

// Service runs the policy scripts.
type Service struct {
	exec  *script.Executor
	max   int
	kinds *actionkind.Registry
}

// New builds the service on exec.
func New(exec *script.Executor, opts Options) *Service {
	defaults.Set(&opts.MaxPerTenant, MaxPerTenant)
	return &Service{exec: exec, max: opts.MaxPerTenant, kinds: opts.Kinds}
}

// stored is a policy as the scripts keep it (one JSON value per policy id).
// Absent optional terms are zero values the scripts read as "not set":
// caps and commit_overage_policy ”, TTLs 0, max_extensions -1. Every number
// stays below 2^53 (validate bounds them), so Lua keeps it exactly.
type stored struct {
	PolicyID                 string `json:"policy_id"`
	TenantID                 string `json:"tenant_id"`
	Name                     string `json:"name"`
	Description              string `json:"description"`
	ScopePattern             string `json:"scope_pattern"`
	LuaPattern               string `json:"lua_pattern"`
	Priority                 int64  `json:"priority"`
	Caps                     string `json:"caps"`
	CommitOveragePolicy      string `json:"commit_overage_policy"`
	DefaultTTLMs             int64  `json:"default_ttl_ms"`
	MaxTTLMs                 int64  `json:"max_ttl_ms"`
	MaxExtensions            int64  `json:"max_extensions"`
	MaxReservationsPerMinute int64  `json:"max_reservations_per_minute"`
	MaxCommitsPerMinute      int64  `json:"max_commits_per_minute"`
	Status                   string `json:"status"`
	EffectiveFromMs          int64  `json:"effective_from_ms"`
	EffectiveUntilMs         int64  `json:"effective_until_ms"`
	CreatedAtMs              int64  `json:"created_at_ms"`
	UpdatedAtMs              int64  `json:"updated_at_ms"`
	// v0.1.26 (governance.go); absent in policies stored before.
	AllowedActionKinds jsonList  `json:"allowed_action_kinds,omitempty"`
	DeniedActionKinds  jsonList  `json:"denied_action_kinds,omitempty"`
	ActionQuotas       quotaList `json:"action_quotas,omitempty"`
	RiskClassQuotas    quotaList `json:"risk_class_quotas,omitempty"`
}

// newID is "pol_<tenant>_<32 hex digits>": the id names its tenant (as a
// reservation id does), so PATCH /v1/admin/policies/{policy_id} finds the
// tenant's policies hash without a tenant_id.
func newID(tenant string) (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("policy id: %w", err)
	}
	return "pol_" + tenant + "_" + hex.EncodeToString(b[:]), nil
}

// TenantOf is the tenant a policy id names ("" when id is not a policy id).
func TenantOf(id string) string {
	rest, ok := strings.CutPrefix(id, "pol_")
	i := strings.LastIndexByte(rest, '_')
	if !ok || i <= 0 || len(rest)-i-1 != 32 {
		return ""
	}
	return rest[:i]
}

// owned refuses an id of another tenant as not found (tenants are isolated:
// the answer is the same as for an id that never existed).
func owned(tenant, id string) error {
	if TenantOf(id) != tenant {
		return apierr.New(apierr.NotFound, "policy %s not found", id).With("policy_id", id)
	}
	return nil
}

func statusKey(s cyclesv1.PolicyStatus) string {
	if s == cyclesv1.PolicyStatus_POLICY_STATUS_DISABLED {
		return "DISABLED"
	}
	return "ACTIVE"
}

// ttlTerms are the stored TTL fields of an override (nil: none set).
func ttlTerms(t *cyclesv1.ReservationTtlOverride) (def, max, ext int64) {
	ext = -1
	if t == nil {
		return 0, 0, -1
	}
	if t.DefaultTtlMs != nil {
		def = t.GetDefaultTtlMs()
	}
	if t.MaxTtlMs != nil {
		max = t.GetMaxTtlMs()
	}
	if t.MaxExtensions != nil {
		ext = int64(t.GetMaxExtensions())
	}
	return def, max, ext
}

func rateTerms(r *cyclesv1.PolicyRateLimits) (res, com int64) {
	if r == nil {
		return 0, 0
	}
	if r.MaxReservationsPerMinute != nil {
		res = int64(r.GetMaxReservationsPerMinute())
	}
	if r.MaxCommitsPerMinute != nil {
		com = int64(r.GetMaxCommitsPerMinute())
	}
	return res, com
}

func encodeCaps(c *cyclesv1.Caps) (string, error) {
	if c == nil {
		return "", nil
	}
	s, err := admin.EncodeCaps(c)
	if err != nil {
		return "", fmt.Errorf("encode caps: %w", err)
	}
	return s, nil
}

// CreateScopePolicy stores a new policy: docs/protocol.md#policies.
func (s *Service) CreateScopePolicy(ctx context.Context, req *cyclesv1.CreateScopePolicyRequest) (*cyclesv1.CreateScopePolicyResponse, error) {
	tenant := req.GetTenantId()
	canon, lua, err := Compile(tenant, req.GetScopePattern())
	if err != nil {
		return nil, apierr.Invalid("scope_pattern", "%s", err.Error())
	}
	id, err := newID(tenant)
	if err != nil {
		return nil, err
	}
	caps, err := encodeCaps(req.GetCaps())
	if err != nil {
		return nil, err
	}
	p := stored{PolicyID: id, TenantID: tenant, Name: req.GetName(), Description: req.GetDescription(),
		ScopePattern: canon, LuaPattern: lua, Priority: int64(req.GetPriority()), Caps: caps,
		CommitOveragePolicy: scope.PolicyKey(req.GetCommitOveragePolicy()), Status: statusKey(req.GetStatus()),
		EffectiveFromMs: req.GetEffectiveFromMs(), EffectiveUntilMs: req.GetEffectiveUntilMs()}
	p.DefaultTTLMs, p.MaxTTLMs, p.MaxExtensions = ttlTerms(req.GetReservationTtlOverride())
	p.MaxReservationsPerMinute, p.MaxCommitsPerMinute = rateTerms(req.GetRateLimits())
	if p.AllowedActionKinds, err = s.kindsOf("allowed_action_kinds", req.GetAllowedActionKinds()); err != nil {
		return nil, err
	}
	if p.DeniedActionKinds, err = s.kindsOf("denied_action_kinds", req.GetDeniedActionKinds()); err != nil {
		return nil, err
	}
	if p.ActionQuotas, err = s.actionQuotasOf(req.GetActionQuotas()); err != nil {
		return nil, err
	}
	p.RiskClassQuotas = riskQuotasOf(req.GetRiskClassQuotas())
	arg, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("encode policy: %w", err)
	}
	t := keys.Tenant(tenant)
	var out stored
	if err := scriptCreate.RunInto(ctx, s.exec, &out, policyKeys{t.Record(), t.Policies(), t.Audit(), t.Events()},
		createArgs{string(arg), s.max, eventctx.Arg(ctx, 0)}); err != nil {
		return nil, err
	}
	pb, err := out.proto()
	if err != nil {
		return nil, err
	}
	return &cyclesv1.CreateScopePolicyResponse{Policy: pb}, nil
}

// GetScopePolicy reads one policy (NOT_FOUND when the tenant has none of that id).
func (s *Service) GetScopePolicy(ctx context.Context, req *cyclesv1.GetScopePolicyRequest) (*cyclesv1.GetScopePolicyResponse, error) {
	if err := owned(req.GetTenantId(), req.GetPolicyId()); err != nil {
		return nil, err
	}
	items, err := s.read(ctx, req.GetTenantId(), req.GetPolicyId())
	if err != nil {
		return nil, err
	}
	if len(items) != 1 {
		return nil, apierr.New(apierr.InternalError, "policy/get answered %d policies for one id", len(items))
	}
	pb, err := items[0].proto()
	if err != nil {
		return nil, err
	}
	return &cyclesv1.GetScopePolicyResponse{Policy: pb}, nil
}

// ListScopePolicies pages a tenant's policies in policy_id order. A tenant
// holds at most MaxPerTenant policies, so one script reads them all and the
// filters and the page are applied here.
func (s *Service) ListScopePolicies(ctx context.Context, req *cyclesv1.ListScopePoliciesRequest) (*cyclesv1.ListScopePoliciesResponse, error) {
	lf, err := listFilterOf(req)
	if err != nil {
		return nil, err
	}
	items, err := s.read(ctx, req.GetTenantId(), "")
	if err != nil {
		return nil, err
	}
	pattern := ""
	if req.GetScopePattern() != "" {
		if pattern, _, err = Compile(req.GetTenantId(), req.GetScopePattern()); err != nil {
			return nil, apierr.Invalid("scope_pattern", "%s", err.Error())
		}
	}
	status := ""
	if req.GetStatus() != cyclesv1.PolicyStatus_POLICY_STATUS_UNSPECIFIED {
		status = statusKey(req.GetStatus())
	}
	sort.Slice(items, func(i, j int) bool { return items[i].PolicyID < items[j].PolicyID })
	limit := int(req.GetLimit())
	defaults.Set(&limit, DefaultListLimit)
	limit = min(limit, MaxListLimit)
	resp := &cyclesv1.ListScopePoliciesResponse{}
	for _, it := range items {
		if it.PolicyID <= req.GetCursor() || (pattern != "" && it.ScopePattern != pattern) || (status != "" && it.Status != status) || !lf.match(it) {
			continue
		}
		if len(resp.Policies) == limit {
			resp.HasMore = true
			resp.NextCursor = resp.Policies[limit-1].GetPolicyId()
			break
		}
		pb, err := it.proto()
		if err != nil {
			return nil, err
		}
		resp.Policies = append(resp.Policies, pb)
	}
	return resp, nil
}

// UpdateScopePolicy changes the fields the request sets; the scope pattern is
// fixed at creation (the governance spec's update body has none).
func (s *Service) UpdateScopePolicy(ctx context.Context, req *cyclesv1.UpdateScopePolicyRequest) (*cyclesv1.UpdateScopePolicyResponse, error) {
	if err := owned(req.GetTenantId(), req.GetPolicyId()); err != nil {
		return nil, err
	}
	patch := map[string]any{}
	if req.Name != nil {
		patch["name"] = req.GetName()
	}
	if req.Description != nil {
		patch["description"] = req.GetDescription()
	}
	if req.Priority != nil {
		patch["priority"] = req.GetPriority()
	}
	if req.Caps != nil {
		caps, err := encodeCaps(req.GetCaps())
		if err != nil {
			return nil, err
		}
		patch["caps"] = caps
	}
	if req.GetCommitOveragePolicy() != cyclesv1.CommitOveragePolicy_COMMIT_OVERAGE_POLICY_UNSPECIFIED {
		patch["commit_overage_policy"] = scope.PolicyKey(req.GetCommitOveragePolicy())
	}
	if req.ReservationTtlOverride != nil {
		patch["default_ttl_ms"], patch["max_ttl_ms"], patch["max_extensions"] = ttlTerms(req.GetReservationTtlOverride())
	}
	if req.RateLimits != nil {
		patch["max_reservations_per_minute"], patch["max_commits_per_minute"] = rateTerms(req.GetRateLimits())
	}
	if req.GetStatus() != cyclesv1.PolicyStatus_POLICY_STATUS_UNSPECIFIED {
		patch["status"] = statusKey(req.GetStatus())
	}
	if req.EffectiveFromMs != nil {
		patch["effective_from_ms"] = req.GetEffectiveFromMs()
	}
	if req.EffectiveUntilMs != nil {
		patch["effective_until_ms"] = req.GetEffectiveUntilMs()
	}
	if err := s.governancePatch(patch, req); err != nil {
		return nil, err
	}
	arg, err := json.Marshal(patch)
	if err != nil {
		return nil, fmt.Errorf("encode policy patch: %w", err)
	}
	t := keys.Tenant(req.GetTenantId())
	var out stored
	if err := scriptUpdate.RunInto(ctx, s.exec, &out, policyKeys{t.Record(), t.Policies(), t.Audit(), t.Events()},
		updateArgs{req.GetPolicyId(), string(arg), eventctx.Arg(ctx, 0)}); err != nil {
		return nil, err
	}
	pb, err := out.proto()
	if err != nil {
		return nil, err
	}
	return &cyclesv1.UpdateScopePolicyResponse{Policy: pb}, nil
}

// getReply is policy/get's reply: the stored policies as JSON strings.
type getReply struct {
	Items jsonList `json:"items"`
}

// read returns one policy (id) or all of a tenant's (id "").
func (s *Service) read(ctx context.Context, tenant, id string) ([]stored, error) {
	var out getReply
	if err := scriptGet.RunInto(ctx, s.exec, &out, policiesKeys{keys.Tenant(tenant).Policies()}, getArgs{id}); err != nil {
		return nil, err
	}
	items := make([]stored, len(out.Items))
	for i, raw := range out.Items {
		if err := json.Unmarshal([]byte(raw), &items[i]); err != nil {
			return nil, apierr.New(apierr.InternalError, "stored policy is malformed: %v", err)
		}
	}
	return items, nil
}

// jsonList is a list of strings as the scripts store and answer it.
type jsonList = script.LuaArray[string]

// proto is the wire form of a stored policy.
func (p stored) proto() (*cyclesv1.ScopePolicy, error) {
	out := &cyclesv1.ScopePolicy{
		PolicyId: p.PolicyID, TenantId: p.TenantID, Name: p.Name, Description: p.Description,
		ScopePattern: p.ScopePattern, Priority: int32(p.Priority),
		CommitOveragePolicy: scope.ParsePolicy(p.CommitOveragePolicy),
		EffectiveFromMs:     p.EffectiveFromMs, EffectiveUntilMs: p.EffectiveUntilMs,
		CreatedAtMs: p.CreatedAtMs, UpdatedAtMs: p.UpdatedAtMs,
	}
	switch p.Status {
	case "ACTIVE":
		out.Status = cyclesv1.PolicyStatus_POLICY_STATUS_ACTIVE
	case "DISABLED":
		out.Status = cyclesv1.PolicyStatus_POLICY_STATUS_DISABLED
	default:
		return nil, apierr.New(apierr.InternalError, "stored policy %s has status %q", p.PolicyID, p.Status)
	}
	if p.Caps != "" {
		c, err := admin.DecodeCaps(p.Caps)
		if err != nil {
			return nil, apierr.New(apierr.InternalError, "stored policy %s has malformed caps", p.PolicyID)
		}
		out.Caps = c
	}
	if p.DefaultTTLMs > 0 || p.MaxTTLMs > 0 || p.MaxExtensions >= 0 {
		t := &cyclesv1.ReservationTtlOverride{}
		if p.DefaultTTLMs > 0 {
			t.DefaultTtlMs = &p.DefaultTTLMs
		}
		if p.MaxTTLMs > 0 {
			t.MaxTtlMs = &p.MaxTTLMs
		}
		if p.MaxExtensions >= 0 {
			n := int32(p.MaxExtensions)
			t.MaxExtensions = &n
		}
		out.ReservationTtlOverride = t
	}
	p.governanceProto(out)
	if p.MaxReservationsPerMinute > 0 || p.MaxCommitsPerMinute > 0 {
		r := &cyclesv1.PolicyRateLimits{}
		if p.MaxReservationsPerMinute > 0 {
			n := int32(p.MaxReservationsPerMinute)
			r.MaxReservationsPerMinute = &n
		}
		if p.MaxCommitsPerMinute > 0 {
			n := int32(p.MaxCommitsPerMinute)
			r.MaxCommitsPerMinute = &n
		}
		out.RateLimits = r
	}
	return out, nil
}
