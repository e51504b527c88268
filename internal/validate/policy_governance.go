package validate

import (
	"fmt"
	"math"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
)

// Bounds of the v0.1.26 policy extensions (governance extensions
// PolicyExtension; ActionQuota and RiskClassQuota of the action-kinds spec).
const (
	govMaxKinds       = 200
	govMaxQuotas      = 50
	govMaxRiskQuotas  = 20
	govMaxKindLen     = 64
	govMaxCalls       = 100_000
	govMinRunTTLMs    = 60_000
	govMaxRunTTLMs    = 604_800_000
	govMaxAllowlist   = 100 // entries of one quota allowlist (the spec sets none; every reserve scans them)
	govMaxHostLen     = 253
	govMaxResourceLen = 128
)

// kindList checks an allow or deny list: at most 200 exact kinds, each
// non-empty, at most 64 bytes, no wildcard, no duplicates.
func kindList(field string, kinds []string) error {
	if len(kinds) > govMaxKinds {
		return invalid(field, "at most %d kinds", govMaxKinds)
	}
	seen := make(map[string]bool, len(kinds))
	for i, k := range kinds {
		f := fmt.Sprintf("%s[%d]", field, i)
		if err := kindName(f, k); err != nil {
			return err
		}
		if seen[k] {
			return invalid(f, "%q is listed twice", k)
		}
		seen[k] = true
	}
	return nil
}

func kindName(field, k string) error {
	if k == "" {
		return invalid(field, "is required")
	}
	if err := Text(field, k, govMaxKindLen); err != nil {
		return err
	}
	for _, c := range k {
		if c == '*' || c == ' ' {
			return invalid(field, "must be an exact action kind (no wildcards or spaces), got %q", k)
		}
	}
	return nil
}

func quotaWindow(field string, w cyclesv1.ActionQuotaWindow, ttl int64, pct float64) error {
	if w == cyclesv1.ActionQuotaWindow_ACTION_QUOTA_WINDOW_UNSPECIFIED {
		return invalid(field+".window", "is required (per_run, per_minute_tumbling, per_hour_tumbling, per_day_tumbling or per_tenant_per_day)")
	}
	if err := declared(field+".window", w, "unknown window %d", w); err != nil {
		return err
	}
	if ttl != 0 {
		if w != cyclesv1.ActionQuotaWindow_ACTION_QUOTA_WINDOW_PER_RUN {
			return invalid(field+".per_run_counter_ttl_ms", "is allowed only with window per_run")
		}
		if err := Range(field+".per_run_counter_ttl_ms", ttl, govMinRunTTLMs, govMaxRunTTLMs); err != nil {
			return err
		}
	}
	if pct != 0 && (math.IsNaN(pct) || pct < 0.01 || pct > 0.99) {
		return invalid(field+".threshold_pct", "must be in 0.01..0.99")
	}
	return nil
}

func allowlist(field string, vs []string, max int) error {
	if len(vs) > govMaxAllowlist {
		return invalid(field, "at most %d entries", govMaxAllowlist)
	}
	for i, v := range vs {
		f := fmt.Sprintf("%s[%d]", field, i)
		if v == "" {
			return invalid(f, "must not be empty")
		}
		if err := Text(f, v, max); err != nil {
			return err
		}
	}
	return nil
}

func actionQuotas(field string, qs []*cyclesv1.ActionQuota) error {
	if len(qs) > govMaxQuotas {
		return invalid(field, "at most %d quotas", govMaxQuotas)
	}
	for i, q := range qs {
		f := fmt.Sprintf("%s[%d]", field, i)
		if err := first(
			kindName(f+".action_kind", q.GetActionKind()),
			Range(f+".max_calls", q.GetMaxCalls(), 1, govMaxCalls),
			quotaWindow(f, q.GetWindow(), q.GetPerRunCounterTtlMs(), q.GetThresholdPct()),
			allowlist(f+".host_allowlist", q.GetHostAllowlist(), govMaxHostLen),
			allowlist(f+".recipient_domain_allowlist", q.GetRecipientDomainAllowlist(), govMaxHostLen),
			allowlist(f+".resource_type_allowlist", q.GetResourceTypeAllowlist(), govMaxResourceLen),
		); err != nil {
			return err
		}
	}
	return nil
}

func riskClassQuotas(field string, qs []*cyclesv1.RiskClassQuota) error {
	if len(qs) > govMaxRiskQuotas {
		return invalid(field, "at most %d quotas", govMaxRiskQuotas)
	}
	for i, q := range qs {
		f := fmt.Sprintf("%s[%d]", field, i)
		if _, ok := cyclesv1.ActionRiskClass_name[int32(q.GetRiskClass())]; !ok ||
			q.GetRiskClass() == cyclesv1.ActionRiskClass_ACTION_RISK_CLASS_UNSPECIFIED {
			return invalid(f+".risk_class", "is required (read_only, local_mutation, side_effect, external_side_effect or high_risk)")
		}
		if err := first(
			Range(f+".max_calls", q.GetMaxCalls(), 1, govMaxCalls),
			quotaWindow(f, q.GetWindow(), q.GetPerRunCounterTtlMs(), q.GetThresholdPct()),
		); err != nil {
			return err
		}
	}
	return nil
}

// governance checks the four v0.1.26 fields of a create (or the ones an
// update sets: nil lists are absent there). allowed and denied may not both
// be non-empty in one request.
func governance(aq []*cyclesv1.ActionQuota, rq []*cyclesv1.RiskClassQuota, allowed, denied []string) error {
	if err := first(
		actionQuotas("action_quotas", aq),
		riskClassQuotas("risk_class_quotas", rq),
		kindList("allowed_action_kinds", allowed),
		kindList("denied_action_kinds", denied),
	); err != nil {
		return err
	}
	if len(allowed) > 0 && len(denied) > 0 {
		return invalid("denied_action_kinds", "allowed_action_kinds and denied_action_kinds are mutually exclusive: set one of them")
	}
	return nil
}

func init() {
	register(func(r *cyclesv1.ListActionQuotaCountersRequest) error {
		if err := first(
			TenantID("tenant_id", r.GetTenantId()),
			Text("scope", r.GetScope(), policyMaxPattern),
			Text("action_kind", r.GetActionKind(), govMaxKindLen),
			declared("window", r.GetWindow(), "unknown window %d", r.GetWindow()),
		); err != nil {
			return err
		}
		return first(
			Text("run_id", r.GetRunId(), 256),
			Limit("limit", &r.Limit, 200),
			Cursor("cursor", r.GetCursor()),
		)
	})
	register(func(r *cyclesv1.ResetActionQuotaCounterRequest) error {
		if r.GetTenantId() == "" {
			return invalid("tenant_id", "is required: the admin key names the tenant that owns the counter")
		}
		if err := TenantID("tenant_id", r.GetTenantId()); err != nil {
			return err
		}
		for _, f := range []struct {
			name, v string
			max     int
		}{{"scope", r.GetScope(), policyMaxPattern}, {"action_kind", r.GetActionKind(), govMaxKindLen}, {"window_key", r.GetWindowKey(), 256}} {
			if f.v == "" {
				return invalid(f.name, "is required")
			}
			if err := Text(f.name, f.v, f.max); err != nil {
				return err
			}
		}
		if r.GetActionKind() == "__risk__" {
			if _, ok := cyclesv1.ActionRiskClass_name[int32(r.GetRiskClass())]; !ok ||
				r.GetRiskClass() == cyclesv1.ActionRiskClass_ACTION_RISK_CLASS_UNSPECIFIED {
				return invalid("risk_class", "is required for a risk-class counter (action_kind __risk__)")
			}
		}
		if _, ok := cyclesv1.ActionQuotaWindow_name[int32(r.GetWindow())]; !ok ||
			r.GetWindow() == cyclesv1.ActionQuotaWindow_ACTION_QUOTA_WINDOW_UNSPECIFIED {
			return invalid("window", "is required")
		}
		return Text("reason", r.GetReason(), 512)
	})
}
