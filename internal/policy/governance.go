package policy

import (
	"fmt"
	"math"
	"strings"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/actionkind"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/script"
)

// The v0.1.26 policy extensions (allow/deny lists, action and risk-class
// quotas) in their stored form; lua/lib/policy.lua compiles them into the
// tenant record's `pol` copy and lua/lib/quota.lua enforces them
// (docs/protocol.md#v0126-action-governance).

// DefaultRunTTLMs is a per_run counter's TTL when the quota sets none.
const DefaultRunTTLMs = 86_400_000

// defaultThresholdBP is threshold_pct 0.80 in basis points.
const defaultThresholdBP = 8000

// storedQuota is one action or risk-class quota as the scripts read it:
// the window by its wire name, threshold_pct in basis points (integers
// only: the scripts compare counts exactly), the per_run TTL resolved.
type storedQuota struct {
	ActionKind  string   `json:"action_kind,omitempty"`
	RiskClass   string   `json:"risk_class,omitempty"`
	MaxCalls    int64    `json:"max_calls"`
	Window      string   `json:"window"`
	TTLMs       int64    `json:"ttl_ms"`
	ThresholdBP int64    `json:"threshold_bp"`
	Hosts       jsonList `json:"hosts,omitempty"`
	Domains     jsonList `json:"domains,omitempty"`
	Resources   jsonList `json:"resources,omitempty"`
}

// quotaList is a list of stored quotas as the scripts store and answer it.
type quotaList = script.LuaArray[storedQuota]

// thresholdBP is threshold_pct (0 = the default 0.80) in basis points.
func thresholdBP(pct float64) int64 {
	if pct == 0 {
		return defaultThresholdBP
	}
	return int64(math.Round(pct * 10000))
}

func runTTL(w cyclesv1.ActionQuotaWindow, ttl int64) int64 {
	if w != cyclesv1.ActionQuotaWindow_ACTION_QUOTA_WINDOW_PER_RUN {
		return 0
	}
	if ttl == 0 {
		return DefaultRunTTLMs
	}
	return ttl
}

// declared refuses a kind the registry refuses at runtime: an undeclared
// custom.* kind (the action-kinds spec: such a kind in a policy is a 400).
func (s *Service) declared(field, kind string) error {
	if s.kinds == nil || !strings.HasPrefix(kind, actionkind.CustomPrefix) {
		return nil
	}
	if s.kinds.Classify(kind).Risk == "" {
		return apierr.Invalid(field, "%q is not a declared custom action kind (declare it with -custom-action-kinds)", kind)
	}
	return nil
}

func (s *Service) kindsOf(field string, kinds []string) (jsonList, error) {
	for i, k := range kinds {
		if err := s.declared(fmt.Sprintf("%s[%d]", field, i), k); err != nil {
			return nil, err
		}
	}
	return jsonList(kinds), nil
}

func (s *Service) actionQuotasOf(qs []*cyclesv1.ActionQuota) (quotaList, error) {
	var out quotaList
	for i, q := range qs {
		if err := s.declared(fmt.Sprintf("action_quotas[%d].action_kind", i), q.GetActionKind()); err != nil {
			return nil, err
		}
		out = append(out, storedQuota{ActionKind: q.GetActionKind(), MaxCalls: q.GetMaxCalls(),
			Window: actionkind.WindowName(q.GetWindow()), TTLMs: runTTL(q.GetWindow(), q.GetPerRunCounterTtlMs()),
			ThresholdBP: thresholdBP(q.GetThresholdPct()), Hosts: q.GetHostAllowlist(),
			Domains: q.GetRecipientDomainAllowlist(), Resources: q.GetResourceTypeAllowlist()})
	}
	return out, nil
}

func riskQuotasOf(qs []*cyclesv1.RiskClassQuota) quotaList {
	var out quotaList
	for _, q := range qs {
		out = append(out, storedQuota{RiskClass: string(actionkind.RiskOf(q.GetRiskClass())), MaxCalls: q.GetMaxCalls(),
			Window: actionkind.WindowName(q.GetWindow()), TTLMs: runTTL(q.GetWindow(), q.GetPerRunCounterTtlMs()),
			ThresholdBP: thresholdBP(q.GetThresholdPct())})
	}
	return out
}

// governanceProto fills the v0.1.26 fields of out from p. Lists come back
// empty rather than nil (the spec: returned, never omitted).
func (p stored) governanceProto(out *cyclesv1.ScopePolicy) {
	out.AllowedActionKinds = append([]string{}, p.AllowedActionKinds...)
	out.DeniedActionKinds = append([]string{}, p.DeniedActionKinds...)
	out.ActionQuotas = []*cyclesv1.ActionQuota{}
	for _, q := range p.ActionQuotas {
		w, _ := actionkind.ParseWindow(q.Window)
		aq := &cyclesv1.ActionQuota{ActionKind: q.ActionKind, MaxCalls: q.MaxCalls, Window: w,
			HostAllowlist: q.Hosts, RecipientDomainAllowlist: q.Domains, ResourceTypeAllowlist: q.Resources,
			ThresholdPct: float64(q.ThresholdBP) / 10000}
		if w == cyclesv1.ActionQuotaWindow_ACTION_QUOTA_WINDOW_PER_RUN {
			aq.PerRunCounterTtlMs = q.TTLMs
		}
		out.ActionQuotas = append(out.ActionQuotas, aq)
	}
	out.RiskClassQuotas = []*cyclesv1.RiskClassQuota{}
	for _, q := range p.RiskClassQuotas {
		w, _ := actionkind.ParseWindow(q.Window)
		rq := &cyclesv1.RiskClassQuota{RiskClass: actionkind.RiskClass(q.RiskClass).Proto(), MaxCalls: q.MaxCalls,
			Window: w, ThresholdPct: float64(q.ThresholdBP) / 10000}
		if w == cyclesv1.ActionQuotaWindow_ACTION_QUOTA_WINDOW_PER_RUN {
			rq.PerRunCounterTtlMs = q.TTLMs
		}
		out.RiskClassQuotas = append(out.RiskClassQuotas, rq)
	}
}

// governancePatch adds the v0.1.26 lists an update sets to patch: a set list
// replaces the stored one (an empty list clears it; the script drops it).
func (s *Service) governancePatch(patch map[string]any, req *cyclesv1.UpdateScopePolicyRequest) error {
	if l := req.GetAllowedActionKinds(); l != nil {
		v, err := s.kindsOf("allowed_action_kinds", l.GetKinds())
		if err != nil {
			return err
		}
		patch["allowed_action_kinds"] = nonNil(v)
	}
	if l := req.GetDeniedActionKinds(); l != nil {
		v, err := s.kindsOf("denied_action_kinds", l.GetKinds())
		if err != nil {
			return err
		}
		patch["denied_action_kinds"] = nonNil(v)
	}
	if l := req.GetActionQuotas(); l != nil {
		v, err := s.actionQuotasOf(l.GetQuotas())
		if err != nil {
			return err
		}
		if v == nil {
			v = quotaList{}
		}
		patch["action_quotas"] = v
	}
	if l := req.GetRiskClassQuotas(); l != nil {
		v := riskQuotasOf(l.GetQuotas())
		if v == nil {
			v = quotaList{}
		}
		patch["risk_class_quotas"] = v
	}
	return nil
}

func nonNil(l jsonList) jsonList {
	if l == nil {
		return jsonList{}
	}
	return l
}
