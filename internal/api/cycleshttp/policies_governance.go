package cycleshttp

import (
	"fmt"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/actionkind"
	"github.com/cyclesgo/cycles-go/internal/apierr"
)

// The v0.1.26 policy extensions on the HTTP wire (governance extensions
// PolicyExtension): action_quotas, risk_class_quotas, allowed_action_kinds,
// denied_action_kinds. Windows and risk classes are the lower-case wire
// names; PATCH replaces a list it carries ([] clears) and leaves one it
// omits.

type actionQuotaJSON struct {
	ActionKind               string   `json:"action_kind"`
	MaxCalls                 int64    `json:"max_calls"`
	Window                   string   `json:"window"`
	HostAllowlist            []string `json:"host_allowlist,omitempty"`
	RecipientDomainAllowlist []string `json:"recipient_domain_allowlist,omitempty"`
	ResourceTypeAllowlist    []string `json:"resource_type_allowlist,omitempty"`
	PerRunCounterTTLMs       int64    `json:"per_run_counter_ttl_ms,omitempty"`
	// ThresholdPct is a ratio, not money: a JSON number is fine here.
	ThresholdPct float64 `json:"threshold_pct,omitempty"`
}

type riskClassQuotaJSON struct {
	RiskClass          string  `json:"risk_class"`
	MaxCalls           int64   `json:"max_calls"`
	Window             string  `json:"window"`
	PerRunCounterTTLMs int64   `json:"per_run_counter_ttl_ms,omitempty"`
	ThresholdPct       float64 `json:"threshold_pct,omitempty"`
}

// governanceIn is the four fields on create and patch (nil: absent).
type governanceIn struct {
	ActionQuotas       *[]actionQuotaJSON    `json:"action_quotas"`
	RiskClassQuotas    *[]riskClassQuotaJSON `json:"risk_class_quotas"`
	AllowedActionKinds *[]string             `json:"allowed_action_kinds"`
	DeniedActionKinds  *[]string             `json:"denied_action_kinds"`
}

func windowOf(field, s string) (cyclesv1.ActionQuotaWindow, error) {
	w, ok := actionkind.ParseWindow(s)
	if !ok {
		return 0, apierr.Invalid(field, "must be per_run, per_minute_tumbling, per_hour_tumbling, per_day_tumbling or per_tenant_per_day, got %q", s)
	}
	return w, nil
}

func (g *governanceIn) actionQuotas() ([]*cyclesv1.ActionQuota, error) {
	if g.ActionQuotas == nil {
		return nil, nil
	}
	out := make([]*cyclesv1.ActionQuota, 0, len(*g.ActionQuotas))
	for i, q := range *g.ActionQuotas {
		w, err := windowOf(fmt.Sprintf("action_quotas[%d].window", i), q.Window)
		if err != nil {
			return nil, err
		}
		out = append(out, &cyclesv1.ActionQuota{ActionKind: q.ActionKind, MaxCalls: q.MaxCalls, Window: w,
			HostAllowlist: q.HostAllowlist, RecipientDomainAllowlist: q.RecipientDomainAllowlist,
			ResourceTypeAllowlist: q.ResourceTypeAllowlist, PerRunCounterTtlMs: q.PerRunCounterTTLMs, ThresholdPct: q.ThresholdPct})
	}
	return out, nil
}

func (g *governanceIn) riskClassQuotas() ([]*cyclesv1.RiskClassQuota, error) {
	if g.RiskClassQuotas == nil {
		return nil, nil
	}
	out := make([]*cyclesv1.RiskClassQuota, 0, len(*g.RiskClassQuotas))
	for i, q := range *g.RiskClassQuotas {
		rc, ok := actionkind.ParseRisk(q.RiskClass)
		if !ok {
			return nil, apierr.Invalid(fmt.Sprintf("risk_class_quotas[%d].risk_class", i),
				"must be read_only, local_mutation, side_effect, external_side_effect or high_risk, got %q", q.RiskClass)
		}
		w, err := windowOf(fmt.Sprintf("risk_class_quotas[%d].window", i), q.Window)
		if err != nil {
			return nil, err
		}
		out = append(out, &cyclesv1.RiskClassQuota{RiskClass: rc.Proto(), MaxCalls: q.MaxCalls, Window: w,
			PerRunCounterTtlMs: q.PerRunCounterTTLMs, ThresholdPct: q.ThresholdPct})
	}
	return out, nil
}

func kindsIn(l *[]string) []string {
	if l == nil {
		return nil
	}
	return *l
}

// create sets the four fields of a create request.
func (g *governanceIn) create(out *cyclesv1.CreateScopePolicyRequest) error {
	aq, err := g.actionQuotas()
	if err != nil {
		return err
	}
	rq, err := g.riskClassQuotas()
	if err != nil {
		return err
	}
	out.ActionQuotas, out.RiskClassQuotas = aq, rq
	out.AllowedActionKinds, out.DeniedActionKinds = kindsIn(g.AllowedActionKinds), kindsIn(g.DeniedActionKinds)
	return nil
}

// update sets the lists a PATCH carries.
func (g *governanceIn) update(out *cyclesv1.UpdateScopePolicyRequest) error {
	aq, err := g.actionQuotas()
	if err != nil {
		return err
	}
	if g.ActionQuotas != nil {
		out.ActionQuotas = &cyclesv1.ActionQuotaList{Quotas: aq}
	}
	rq, err := g.riskClassQuotas()
	if err != nil {
		return err
	}
	if g.RiskClassQuotas != nil {
		out.RiskClassQuotas = &cyclesv1.RiskClassQuotaList{Quotas: rq}
	}
	if g.AllowedActionKinds != nil {
		out.AllowedActionKinds = &cyclesv1.ActionKindList{Kinds: *g.AllowedActionKinds}
	}
	if g.DeniedActionKinds != nil {
		out.DeniedActionKinds = &cyclesv1.ActionKindList{Kinds: *g.DeniedActionKinds}
	}
	return nil
}
