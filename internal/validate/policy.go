package validate

import (
	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
)

// Scope policy bounds (PolicyService; the governance spec's Policy schema).
// The pattern's syntax is the domain's (internal/policy.Compile): it needs
// the owning tenant.
const (
	policyMaxName        = 256
	policyMaxDescription = 1024
	policyMaxPattern     = 1024
	policyMinTTLMs       = 1_000
	policyMaxTTLMs       = 86_400_000
	policyMaxPriority    = 1_000_000
	policyMaxTimeMs      = 9_999_999_999_999
	// policyMaxID bounds a policy id (cyclesd makes "pol_<tenant>_" + 32 hex digits).
	policyMaxID = 128
)

func policyStatus(field string, s cyclesv1.PolicyStatus) error {
	return declared(field, s, "unknown status %d", s)
}

// policyTerms checks the fields create and update share.
func policyTerms(priority *int32, caps *cyclesv1.Caps, pol cyclesv1.CommitOveragePolicy,
	ttl *cyclesv1.ReservationTtlOverride, rl *cyclesv1.PolicyRateLimits, status cyclesv1.PolicyStatus) error {
	if priority != nil {
		if err := Range("priority", int64(*priority), 0, policyMaxPriority); err != nil {
			return err
		}
	}
	if err := first(
		Caps("caps", caps),
		Policy("commit_overage_policy", pol),
	); err != nil {
		return err
	}
	if ttl != nil {
		if ttl.DefaultTtlMs != nil {
			if err := Range("reservation_ttl_override.default_ttl_ms", ttl.GetDefaultTtlMs(), policyMinTTLMs, policyMaxTTLMs); err != nil {
				return err
			}
		}
		if ttl.MaxTtlMs != nil {
			if err := Range("reservation_ttl_override.max_ttl_ms", ttl.GetMaxTtlMs(), policyMinTTLMs, policyMaxTTLMs); err != nil {
				return err
			}
		}
		if ttl.MaxExtensions != nil {
			if err := Range("reservation_ttl_override.max_extensions", int64(ttl.GetMaxExtensions()), 0, 1_000_000); err != nil {
				return err
			}
		}
	}
	if rl != nil {
		if rl.MaxReservationsPerMinute != nil {
			if err := Range("rate_limits.max_reservations_per_minute", int64(rl.GetMaxReservationsPerMinute()), 1, 1<<31-1); err != nil {
				return err
			}
		}
		if rl.MaxCommitsPerMinute != nil {
			if err := Range("rate_limits.max_commits_per_minute", int64(rl.GetMaxCommitsPerMinute()), 1, 1<<31-1); err != nil {
				return err
			}
		}
	}
	return policyStatus("status", status)
}

// effectiveWindow: both bounds >= 0 (0 = open), until after from when both are set.
func effectiveWindow(from, until int64) error {
	// Below 10^13 ms (year 2286): the scripts keep times as exact doubles.
	if err := first(
		Range("effective_from", from, 0, policyMaxTimeMs),
		Range("effective_until", until, 0, policyMaxTimeMs),
	); err != nil {
		return err
	}
	if from > 0 && until > 0 && until <= from {
		return invalid("effective_until", "must be after effective_from")
	}
	return nil
}

func init() {
	register(func(r *cyclesv1.CreateScopePolicyRequest) error {
		if err := TenantID("tenant_id", r.GetTenantId()); err != nil {
			return err
		}
		if r.GetName() == "" {
			return invalid("name", "is required")
		}
		if err := first(
			Text("name", r.GetName(), policyMaxName),
			Text("description", r.GetDescription(), policyMaxDescription),
		); err != nil {
			return err
		}
		if r.GetScopePattern() == "" {
			return invalid("scope_pattern", "is required")
		}
		if len(r.GetScopePattern()) > policyMaxPattern {
			return invalid("scope_pattern", "must be at most %d bytes", policyMaxPattern)
		}
		p := r.GetPriority()
		if err := policyTerms(&p, r.GetCaps(), r.GetCommitOveragePolicy(), r.GetReservationTtlOverride(),
			r.GetRateLimits(), r.GetStatus()); err != nil {
			return err
		}
		return first(
			governance(r.GetActionQuotas(), r.GetRiskClassQuotas(), r.GetAllowedActionKinds(), r.GetDeniedActionKinds()),
			effectiveWindow(r.GetEffectiveFromMs(), r.GetEffectiveUntilMs()),
		)
	})
	register(func(r *cyclesv1.GetScopePolicyRequest) error {
		return first(
			TenantID("tenant_id", r.GetTenantId()),
			ID("policy_id", r.GetPolicyId(), policyMaxID),
		)
	})
	register(func(r *cyclesv1.ListScopePoliciesRequest) error {
		if err := TenantID("tenant_id", r.GetTenantId()); err != nil {
			return err
		}
		if len(r.GetScopePattern()) > policyMaxPattern {
			return invalid("scope_pattern", "must be at most %d bytes", policyMaxPattern)
		}
		return first(
			policyStatus("status", r.GetStatus()),
			Limit("limit", &r.Limit, 200),
			Cursor("cursor", r.GetCursor()),
		)
	})
	register(func(r *cyclesv1.UpdateScopePolicyRequest) error {
		if err := first(
			TenantID("tenant_id", r.GetTenantId()),
			ID("policy_id", r.GetPolicyId(), policyMaxID),
		); err != nil {
			return err
		}
		if r.Name != nil {
			if r.GetName() == "" {
				return invalid("name", "must not be empty")
			}
			if err := Text("name", r.GetName(), policyMaxName); err != nil {
				return err
			}
		}
		if err := Text("description", r.GetDescription(), policyMaxDescription); err != nil {
			return err
		}
		if err := policyTerms(r.Priority, r.GetCaps(), r.GetCommitOveragePolicy(), r.GetReservationTtlOverride(),
			r.GetRateLimits(), r.GetStatus()); err != nil {
			return err
		}
		if err := governance(r.GetActionQuotas().GetQuotas(), r.GetRiskClassQuotas().GetQuotas(),
			r.GetAllowedActionKinds().GetKinds(), r.GetDeniedActionKinds().GetKinds()); err != nil {
			return err
		}
		return effectiveWindow(r.GetEffectiveFromMs(), r.GetEffectiveUntilMs())
	})
}
