package server

import (
	"context"
	"strings"

	"github.com/cyclesgo/cycles-go/pkg/apierr"
	"github.com/cyclesgo/cycles-go/pkg/auth"
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
		strings.HasPrefix(fullMethod, "/grpc.reflection."):
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

// authenticator resolves the caller of one RPC.
type authenticator struct {
	verifier auth.Verifier
	adminKey string
}

func (a *authenticator) authenticate(ctx context.Context, fullMethod string) (context.Context, error) {
	rule := accessOf(fullMethod)
	if rule == accessNone {
		return ctx, nil
	}
	if adminKey := auth.FirstMetadata(ctx, auth.AdminKeyHeader); adminKey != "" && (rule == accessAdmin || rule == accessEither) {
		if !auth.EqualAdminKey(adminKey, a.adminKey) {
			return ctx, apierr.New(apierr.Unauthorized, "invalid admin key")
		}
		return auth.WithPrincipal(ctx, auth.Principal{Admin: true}), nil
	}
	if rule == accessAdmin {
		return ctx, apierr.New(apierr.Unauthorized, "this method needs the admin key in metadata %s", auth.AdminKeyHeader)
	}
	apiKey := auth.FirstMetadata(ctx, auth.APIKeyHeader)
	if apiKey == "" {
		return ctx, apierr.New(apierr.Unauthorized, "missing API key in metadata %s", auth.APIKeyHeader)
	}
	if a.verifier == nil {
		return ctx, apierr.New(apierr.Unauthorized, "API keys are not configured")
	}
	p, err := a.verifier.VerifyAPIKey(ctx, apiKey)
	if err != nil {
		return ctx, err
	}
	return auth.WithPrincipal(ctx, p), nil
}
