package ratelimit

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/cyclesgo/cycles-go/pkg/apierr"
	"github.com/cyclesgo/cycles-go/pkg/auth"
	"github.com/cyclesgo/cycles-go/pkg/reqctx"
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

// Response metadata the guard sets on guarded calls (HTTP-style names, so
// gateways can forward them).
const (
	HeaderLimit      = "x-ratelimit-limit"
	HeaderRemaining  = "x-ratelimit-remaining"
	HeaderReset      = "x-ratelimit-reset" // seconds until the usage fully resets
	HeaderRetryAfter = "retry-after"       // seconds, on denials
)

// UnaryGuard returns the interceptor that rate-limits guarded RPCs per API
// key. It runs after authentication (it reads auth.FromContext); calls
// without an API-key principal (admin, unauthenticated methods) pass.
//
// A denial is RESOURCE_EXHAUSTED with ErrorInfo reason LIMIT_EXCEEDED and
// google.rpc.RetryInfo: throttling, never confused with budget exhaustion
// (FAILED_PRECONDITION). A configured policy that does not exist lets calls
// pass (counted in cycles.ratelimit.guard.skipped): a configuration mistake
// must not take the API down. A store failure fails closed (UNAVAILABLE),
// like every Redis-backed RPC.
func (l *Limiter) UnaryGuard(cfg GuardConfig) grpc.UnaryServerInterceptor {
	prefixes := cfg.MethodPrefixes
	if len(prefixes) == 0 {
		prefixes = []string{RuntimeMethodPrefix}
	}
	guarded := func(method string) bool {
		for _, p := range prefixes {
			if strings.HasPrefix(method, p) {
				return true
			}
		}
		return false
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if !guarded(info.FullMethod) {
			return handler(ctx, req)
		}
		p, ok := auth.FromContext(ctx)
		if !ok || p.KeyID == "" {
			return handler(ctx, req)
		}
		type check struct{ policy, key string }
		var checks []check
		if pol := cfg.MethodPolicies[info.FullMethod]; pol != "" {
			checks = append(checks, check{pol, APIKeyKey(p.KeyID, info.FullMethod)})
		}
		pol := cfg.Policy
		if kp, ok := cfg.KeyPolicies[p.KeyID]; ok {
			pol = kp
		}
		if pol != "" {
			checks = append(checks, check{pol, APIKeyKey(p.KeyID, "")})
		}
		var tightest *Decision
		for _, c := range checks {
			d, err := l.Check(ctx, c.policy, c.key, 1)
			if apierr.HasCode(err, apierr.PolicyNotFound) {
				l.m.guardSkipped.Add(ctx, 1, metric.WithAttributes(attribute.String("reason", "policy_not_found")))
				continue
			}
			if err != nil {
				return nil, err
			}
			if !d.Allowed {
				l.m.guardDecisions.Add(ctx, 1, metric.WithAttributes(
					attribute.String("method", info.FullMethod), attribute.String("outcome", "denied")))
				setRateHeaders(ctx, d)
				return nil, limitExceeded(ctx, d)
			}
			if tightest == nil || d.Remaining < tightest.Remaining {
				dd := d
				tightest = &dd
			}
		}
		if tightest != nil {
			l.m.guardDecisions.Add(ctx, 1, metric.WithAttributes(
				attribute.String("method", info.FullMethod), attribute.String("outcome", "allowed")))
			setRateHeaders(ctx, *tightest)
		}
		return handler(ctx, req)
	}
}

// limitExceeded is the throttling error of a denial, already a gRPC status
// (so it keeps its RetryInfo whatever interceptor sits outside the guard).
func limitExceeded(ctx context.Context, d Decision) error {
	retry := d.RetryAfter
	if retry <= 0 {
		retry = 1 // RetryInfo needs a positive delay; scripts always give one.
	}
	e := &apierr.Error{
		Code:       apierr.LimitExceeded,
		Message:    fmt.Sprintf("rate limit %s exceeded (%d per %d ms); retry after %d ms", d.Policy, d.Limit, d.WindowMs, retry.Milliseconds()),
		RetryAfter: retry,
	}
	e.With("policy", d.Policy).
		With("limit", strconv.FormatInt(d.Limit, 10)).
		With("remaining", strconv.FormatInt(d.Remaining, 10)).
		With("retry_after_ms", strconv.FormatInt(retry.Milliseconds(), 10)).
		With("reset_after_ms", strconv.FormatInt(d.ResetAfter.Milliseconds(), 10))
	return e.Status(reqctx.RequestID(ctx), reqctx.TraceID(ctx)).Err()
}

func setRateHeaders(ctx context.Context, d Decision) {
	md := metadata.Pairs(
		HeaderLimit, strconv.FormatInt(d.Limit, 10),
		HeaderRemaining, strconv.FormatInt(d.Remaining, 10),
		HeaderReset, strconv.FormatInt(ceilSeconds(d.ResetAfter.Milliseconds()), 10),
	)
	if !d.Allowed {
		md.Append(HeaderRetryAfter, strconv.FormatInt(ceilSeconds(d.RetryAfter.Milliseconds()), 10))
	}
	// Best effort: fails only outside a server call (e.g. unit tests calling
	// the interceptor directly), and the status carries the same facts.
	_ = grpc.SetHeader(ctx, md)
}

func ceilSeconds(ms int64) int64 { return (ms + 999) / 1000 }
