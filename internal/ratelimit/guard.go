package ratelimit

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/cyclesgo/cycles-go/internal/apierr"
)

// RuntimeMethodPrefix selects the runtime RPCs, the guard's default scope.
const RuntimeMethodPrefix = "/cycles.v1.RuntimeService/"

// GuardConfig maps callers and methods to policies.
//
// For a guarded call by API key K to method M, the guard checks, in order:
//  1. MethodPolicies[M], if set, on key "k/<K><M>" (a per-key, per-method limit);
//  2. KeyPolicies[K], else Policy, if set, on key "k/<K>" (the key-wide limit).
//
// The first denial wins. A hit counted by (1) is not refunded when (2) denies.
type GuardConfig struct {
	// Policy is the key-wide policy of every API key (empty: none).
	Policy string
	// KeyPolicies overrides Policy for specific API key ids.
	KeyPolicies map[string]string
	// MethodPolicies adds a per-(API key, method) policy for full method
	// names such as "/cycles.v1.RuntimeService/CreateReservation".
	MethodPolicies map[string]string
	// MethodPrefixes selects the guarded methods (default: RuntimeMethodPrefix).
	MethodPrefixes []string
}

var defaultGuardPrefixes = []string{RuntimeMethodPrefix}

// Guards reports whether calls to method (a full method name) are guarded.
func (c GuardConfig) Guards(method string) bool {
	prefixes := c.MethodPrefixes
	if len(prefixes) == 0 {
		prefixes = defaultGuardPrefixes
	}
	for _, p := range prefixes {
		if strings.HasPrefix(method, p) {
			return true
		}
	}
	return false
}

// Guard decides one call by API key keyID to method (a full method name)
// under cfg. It is transport-free: internal/server's RateLimitGuard interceptor
// calls it after authentication and turns the answer into gRPC headers and
// status.
//
// checked is false when no limit applied: the method is not guarded, there
// is no API key (keyID "": admin, unauthenticated methods) or no configured
// policy exists. Otherwise d is the first denial (d.Allowed false; the call
// must be refused with LimitExceeded(d)) or, when every check allowed, the
// tightest decision (least remaining), which the caller reports.
//
// A configured policy that does not exist is skipped (counted in
// cycles.ratelimit.guard.skipped): a configuration mistake must not take the
// API down. So is a check Redis refuses as full (STORE_FULL): the guard
// protects that memory, and reads and settlements must still answer. A store failure is returned as err, and callers fail closed
// (UNAVAILABLE), like every Redis-backed RPC.
func (l *Limiter) Guard(ctx context.Context, cfg GuardConfig, method, keyID string) (d Decision, checked bool, err error) {
	if keyID == "" || !cfg.Guards(method) {
		return Decision{}, false, nil
	}
	type check struct{ policy, key string }
	var checks []check
	if pol := cfg.MethodPolicies[method]; pol != "" {
		checks = append(checks, check{pol, APIKeyKey(keyID, method)})
	}
	pol := cfg.Policy
	if kp, ok := cfg.KeyPolicies[keyID]; ok {
		pol = kp
	}
	if pol != "" {
		checks = append(checks, check{pol, APIKeyKey(keyID, "")})
	}
	var tightest *Decision
	for _, c := range checks {
		d, err := l.Check(ctx, c.policy, c.key, 1)
		if apierr.HasCode(err, apierr.PolicyNotFound) {
			l.m.guardSkipped.Add(ctx, 1, metric.WithAttributes(attribute.String("reason", "policy_not_found")))
			continue
		}
		if apierr.HasCode(err, apierr.StoreFull) {
			// Redis is full and refuses the limiter's write. The guard
			// exists to protect that memory, and the call's own script is
			// refused too if it would add any; reads and the allow-oom
			// settlements (commit, release, revoke) must keep working.
			l.m.guardSkipped.Add(ctx, 1, metric.WithAttributes(attribute.String("reason", "store_full")))
			continue
		}
		if err != nil {
			return Decision{}, false, err
		}
		if !d.Allowed {
			l.m.guardDecisions.Add(ctx, 1, metric.WithAttributes(
				attribute.String("method", method), attribute.String("outcome", "denied")))
			return d, true, nil
		}
		if tightest == nil || d.Remaining < tightest.Remaining {
			dd := d
			tightest = &dd
		}
	}
	if tightest == nil {
		return Decision{}, false, nil
	}
	l.m.guardDecisions.Add(ctx, 1, metric.WithAttributes(
		attribute.String("method", method), attribute.String("outcome", "allowed")))
	return *tightest, true, nil
}

// LimitExceeded is the refusal of a call the guard denied: LIMIT_EXCEEDED
// (RESOURCE_EXHAUSTED, throttling, never confused with budget exhaustion)
// with the policy's facts as details and RetryAfter for google.rpc.RetryInfo.
func LimitExceeded(d Decision) *apierr.Error {
	retry := d.RetryAfter
	if retry <= 0 {
		retry = 1 // RetryInfo needs a positive delay; scripts always give one.
	}
	e := &apierr.Error{
		Code:       apierr.LimitExceeded,
		Message:    fmt.Sprintf("rate limit %s exceeded (%d per %d ms); retry after %d ms", d.Policy, d.Limit, d.WindowMs, retry.Milliseconds()),
		RetryAfter: retry,
	}
	return e.With("policy", d.Policy).
		With("limit", strconv.FormatInt(d.Limit, 10)).
		With("remaining", strconv.FormatInt(d.Remaining, 10)).
		With("retry_after_ms", strconv.FormatInt(retry.Milliseconds(), 10)).
		With("reset_after_ms", strconv.FormatInt(d.ResetAfter.Milliseconds(), 10))
}
