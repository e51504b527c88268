package server

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/metric"

	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
)

// access is who may call a method.
type access int

const (
	accessNone   access = iota + 1 // health, reflection
	accessTenant                   // a tenant API key
	accessAdmin                    // the admin key
	accessEither                   // a tenant API key or the admin key
)

// IntrospectMethod names the credential introspection of the HTTP wire
// (GET /v1/auth/introspect) for the chain: any valid key may ask who it is.
const IntrospectMethod = "/cycles.v1.Auth/Introspect"

// accessOf is the auth rule of a full method name. Unknown methods need the
// admin key, so a new RPC is never accidentally public.
func accessOf(fullMethod string) access {
	switch {
	case strings.HasPrefix(fullMethod, "/grpc.health.v1.Health/"),
		strings.HasPrefix(fullMethod, "/grpc.reflection."),
		// The action-kind registry is public (Cycles v0.1.26).
		strings.HasPrefix(fullMethod, "/cycles.v1.ActionKindService/"):
		return accessNone
	case strings.HasPrefix(fullMethod, "/cycles.v1.RuntimeService/"):
		return accessTenant
	case strings.HasPrefix(fullMethod, "/cycles.v1.EventService/"),
		fullMethod == IntrospectMethod,
		fullMethod == "/cycles.v1.RateLimitService/Check",
		fullMethod == "/cycles.v1.RateLimitService/Inspect":
		return accessEither
	default:
		return accessAdmin
	}
}

// authenticator resolves the caller of one RPC: in the pre-auth tap
// (preauth.go) from memory, and in the auth interceptor for what only the
// store can judge.
type authenticator struct {
	verifier auth.Verifier
	adminKey string
	peers    *peerGuard
	// preauthRefusals counts requests refused by the tap (attribute reason).
	preauthRefusals metric.Int64Counter
	// audit records refused authentications (nil = not recorded).
	audit Auditor
}

func (a *authenticator) authenticate(ctx context.Context, fullMethod string) (context.Context, error) {
	if _, ok := auth.FromContext(ctx); ok {
		return ctx, nil // resolved by the tap
	}
	v, p, apiKey, err := a.local(ctx, fullMethod)
	switch {
	case err != nil:
		a.peers.fail(peerKey(ctx))
		a.authRefused(ctx, peerKey(ctx), err)
		return ctx, err
	case v == verdictPublic:
		return ctx, nil
	case v == verdictResolved:
		return auth.WithPrincipal(ctx, p), nil
	}
	p, err = a.verifier.VerifyAPIKey(ctx, apiKey)
	if err != nil {
		if apierr.HasCode(err, apierr.Unauthorized) {
			a.peers.fail(peerKey(ctx))
			a.authRefused(ctx, peerKey(ctx), err)
		}
		return ctx, err
	}
	return auth.WithPrincipal(ctx, p), nil
}
