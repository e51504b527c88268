// Package authapi is the gRPC handler of AuthService: what the calling
// credential is and may do, from the principal the auth interceptor put in
// the context. The HTTP wire's GET /v1/auth/introspect answers with the same
// function.
package authapi

import (
	"context"
	"slices"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/permission"
)

type handler struct {
	cyclesv1.UnimplementedAuthServiceServer
	v Validator
}

// Validator judges a presented API key (internal/admin.Service).
type Validator interface {
	ValidateApiKey(ctx context.Context, presented string) (*cyclesv1.ValidateResponse, error)
}

// New returns the AuthService implementation; v answers Validate.
func New(v Validator) cyclesv1.AuthServiceServer { return handler{v: v} }

// Validate answers whether a presented key authenticates now (admin only,
// by the access table).
func (h handler) Validate(ctx context.Context, r *cyclesv1.ValidateRequest) (*cyclesv1.ValidateResponse, error) {
	return h.v.ValidateApiKey(ctx, r.GetKeySecret())
}

func (handler) Introspect(ctx context.Context, _ *cyclesv1.IntrospectRequest) (*cyclesv1.IntrospectResponse, error) {
	return Introspect(ctx)
}

// Introspect describes the caller: the admin key holds "*" and every
// capability; an API key its permissions, the capabilities the governance
// spec derives from them, its tenant and key id.
func Introspect(ctx context.Context) (*cyclesv1.IntrospectResponse, error) {
	p, ok := auth.FromContext(ctx)
	if !ok {
		return nil, apierr.New(apierr.Unauthorized, "no credential")
	}
	if p.Admin {
		return &cyclesv1.IntrospectResponse{Authenticated: true, AuthType: "admin", Permissions: []string{"*"},
			Capabilities: permission.Capabilities(true, nil)}, nil
	}
	return &cyclesv1.IntrospectResponse{Authenticated: true, AuthType: "tenant",
		Permissions:  slices.Clone(p.Permissions),
		Capabilities: permission.Capabilities(false, p.Permissions),
		TenantId:     p.Tenant, KeyId: auth.PublicKeyID(p.Tenant, p.KeyID), ScopeFilter: slices.Clone(p.ScopeFilter)}, nil
}
