package server

import (
	"context"
	"strconv"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/ratelimit"
	"github.com/cyclesgo/cycles-go/internal/reqctx"
)

// Response metadata the rate-limit guard sets on guarded calls (HTTP-style
// names, so gateways and the HTTP wire can forward them).
const (
	RateLimitHeader          = "x-ratelimit-limit"
	RateLimitRemainingHeader = "x-ratelimit-remaining"
	RateLimitResetHeader     = "x-ratelimit-reset" // seconds until the usage fully resets
	RetryAfterHeader         = "retry-after"       // seconds, on denials
)

// RateLimitGuard returns the interceptor (Options.Guard) that rate-limits
// guarded RPCs per API key with lim.Guard. It runs after authentication (it
// reads auth.FromContext); calls without an API-key principal (admin,
// unauthenticated methods) pass.
//
// A denial is RESOURCE_EXHAUSTED with ErrorInfo reason LIMIT_EXCEEDED and
// google.rpc.RetryInfo (ratelimit.LimitExceeded). A configured policy that
// does not exist lets calls pass; a store failure fails closed (UNAVAILABLE).
func RateLimitGuard(lim *ratelimit.Limiter, cfg ratelimit.GuardConfig) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		// lim.Guard decides whether the method is guarded (checked false if not).
		p, _ := auth.FromContext(ctx)
		d, checked, err := lim.Guard(ctx, cfg, info.FullMethod, p.KeyID)
		if err != nil {
			return nil, err
		}
		if !checked {
			return handler(ctx, req)
		}
		setRateHeaders(ctx, d)
		if !d.Allowed {
			// Already a gRPC status, so it keeps its RetryInfo whatever
			// interceptor sits outside the guard.
			return nil, ratelimit.LimitExceeded(d).Status(reqctx.RequestID(ctx), reqctx.TraceID(ctx)).Err()
		}
		return handler(ctx, req)
	}
}

func setRateHeaders(ctx context.Context, d ratelimit.Decision) {
	md := metadata.Pairs(
		RateLimitHeader, strconv.FormatInt(d.Limit, 10),
		RateLimitRemainingHeader, strconv.FormatInt(d.Remaining, 10),
		RateLimitResetHeader, strconv.FormatInt(ceilSeconds(d.ResetAfter.Milliseconds()), 10),
	)
	if !d.Allowed {
		md.Append(RetryAfterHeader, strconv.FormatInt(ceilSeconds(d.RetryAfter.Milliseconds()), 10))
	}
	// Best effort: fails only outside a server call (e.g. unit tests calling
	// the interceptor directly), and the status carries the same facts.
	_ = grpc.SetHeader(ctx, md)
}

func ceilSeconds(ms int64) int64 { return (ms + 999) / 1000 }
