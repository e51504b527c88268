package validate

import (
	"unicode"
	"unicode/utf8"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
)

// Rate-limit bounds. They keep every quantity a rate-limit script computes
// (limit x window for the token bucket and the sliding window) below 2^53, so
// Lua numbers are exact there, and they bound the memory of one log key.
const (
	// MaxRateLimitWindowMs is one day: longer horizons are quotas, not rates.
	MaxRateLimitWindowMs = 86_400_000
	// MaxRateLimitSlackMs bounds the extra key lifetime past the window.
	MaxRateLimitSlackMs = 86_400_000
	// MaxLogLimit bounds the entries one log key may hold (SLIDING_LOG,
	// CAPPED_LOG, PACKED_LOG): 100,000 entries is ~8 MB as a sorted set.
	MaxLogLimit = 100_000
	// MaxLogCap bounds CAPPED_LOG's cap.
	MaxLogCap = 2 * MaxLogLimit
	// MaxCounterLimit bounds SLIDING_WINDOW and TOKEN_BUCKET limits
	// (limit x MaxRateLimitWindowMs < 2^53).
	MaxCounterLimit = 100_000_000
	// MaxRateLimitKeyLen bounds a caller's rate-limit key.
	MaxRateLimitKeyLen = 512
	// MaxRateLimitPolicyNameLen bounds a policy name.
	MaxRateLimitPolicyNameLen = 128
)

// RateLimitPolicyName: required, [a-zA-Z0-9_.-]{1,128}.
func RateLimitPolicyName(field, v string) error {
	return ID(field, v, MaxRateLimitPolicyNameLen)
}

// RateLimitKey: required, 1..512 bytes of valid UTF-8 without '{', '}',
// whitespace or control characters, so a key can never leave (or add) the
// Redis hash tag of cy:rl:{<policy>:<key>}.
func RateLimitKey(field, v string) error {
	return rateLimitKey(field, v, MaxRateLimitKeyLen)
}

// RateLimitStateKey is RateLimitKey with room for a server-side namespace
// prefix (tenant, API key, Envoy domain); the domain checks its own keys.
func RateLimitStateKey(field, v string) error {
	return rateLimitKey(field, v, 2*MaxRateLimitKeyLen)
}

func rateLimitKey(field, v string, max int) error {
	if v == "" {
		return invalid(field, "is required")
	}
	if len(v) > max {
		return invalid(field, "must be at most %d bytes", max)
	}
	if !utf8.ValidString(v) {
		return invalid(field, "must be valid UTF-8")
	}
	for _, r := range v {
		if r == '{' || r == '}' || unicode.IsSpace(r) || unicode.IsControl(r) {
			return invalid(field, "must not contain '{', '}', whitespace or control characters")
		}
	}
	return nil
}

// IsLogAlgorithm reports whether a stores one entry per request (its limit is
// bounded by MaxLogLimit).
func IsLogAlgorithm(a cyclesv1.Algorithm) bool {
	switch a {
	case cyclesv1.Algorithm_ALGORITHM_SLIDING_LOG, cyclesv1.Algorithm_ALGORITHM_CAPPED_LOG, cyclesv1.Algorithm_ALGORITHM_PACKED_LOG:
		return true
	}
	return false
}

// MinSlackMs is the smallest slack allowed for a window: 10% of it, rounded
// up, so a key whose newest entry is live never expires early.
func MinSlackMs(windowMs int64) int64 { return (windowMs + 9) / 10 }

// RateLimitPolicy checks a policy's shape: a known algorithm, 0 < limit,
// 0 < window, cap only on CAPPED_LOG and >= limit, slack >= 10% of the window.
// Zero cap and slack mean "default" (1.2 x limit, 10% of the window).
func RateLimitPolicy(field string, p *cyclesv1.Policy) error {
	if p == nil {
		return invalid(field, "is required")
	}
	if err := RateLimitPolicyName(field+".name", p.GetName()); err != nil {
		return err
	}
	alg := p.GetAlgorithm()
	if _, known := cyclesv1.Algorithm_name[int32(alg)]; !known || alg == cyclesv1.Algorithm_ALGORITHM_UNSPECIFIED {
		return invalid(field+".algorithm", "must be one of SLIDING_LOG, CAPPED_LOG, SLIDING_WINDOW, TOKEN_BUCKET, PACKED_LOG")
	}
	maxLimit := int64(MaxCounterLimit)
	if IsLogAlgorithm(alg) {
		maxLimit = MaxLogLimit
	}
	if p.GetLimit() <= 0 {
		return invalid(field+".limit", "must be > 0")
	}
	if p.GetLimit() > maxLimit {
		return invalid(field+".limit", "must be at most %d for %s", maxLimit, alg)
	}
	if p.GetWindowMs() <= 0 {
		return invalid(field+".window_ms", "must be > 0")
	}
	if p.GetWindowMs() > MaxRateLimitWindowMs {
		return invalid(field+".window_ms", "must be at most %d", MaxRateLimitWindowMs)
	}
	switch {
	case p.GetCap() < 0:
		return invalid(field+".cap", "must be >= 0")
	case p.GetCap() != 0 && alg != cyclesv1.Algorithm_ALGORITHM_CAPPED_LOG:
		return invalid(field+".cap", "applies to CAPPED_LOG only")
	case p.GetCap() != 0 && p.GetCap() < p.GetLimit():
		return invalid(field+".cap", "must be >= limit (%d)", p.GetLimit())
	case p.GetCap() > MaxLogCap:
		return invalid(field+".cap", "must be at most %d", MaxLogCap)
	}
	switch min := MinSlackMs(p.GetWindowMs()); {
	case p.GetSlackMs() < 0:
		return invalid(field+".slack_ms", "must be >= 0")
	case p.GetSlackMs() != 0 && p.GetSlackMs() < min:
		return invalid(field+".slack_ms", "must be >= 10%% of the window (%d)", min)
	case p.GetSlackMs() > MaxRateLimitSlackMs:
		return invalid(field+".slack_ms", "must be at most %d", MaxRateLimitSlackMs)
	}
	return nil
}

// RateLimitService request validators.
func init() {
	register(func(r *cyclesv1.CheckRequest) error {
		if err := first(
			RateLimitPolicyName("policy", r.GetPolicy()),
			RateLimitKey("key", r.GetKey()),
		); err != nil {
			return err
		}
		// hits <= limit needs the policy: the domain checks it.
		return Range("hits", r.GetHits(), 0, MaxCounterLimit)
	})
	register(func(r *cyclesv1.CreatePolicyRequest) error {
		return RateLimitPolicy("policy", r.GetPolicy())
	})
	register(func(r *cyclesv1.UpdatePolicyRequest) error {
		return RateLimitPolicy("policy", r.GetPolicy())
	})
	register(func(r *cyclesv1.DeletePolicyRequest) error {
		return RateLimitPolicyName("name", r.GetName())
	})
	register(func(r *cyclesv1.GetPolicyRequest) error {
		return RateLimitPolicyName("name", r.GetName())
	})
	register(func(*cyclesv1.ListPoliciesRequest) error { return nil })
	register(func(r *cyclesv1.InspectRequest) error {
		return first(
			RateLimitPolicyName("policy", r.GetPolicy()),
			RateLimitKey("key", r.GetKey()),
		)
	})
}
