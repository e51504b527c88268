package server

import (
	"context"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/contract"
	"github.com/cyclesgo/cycles-go/internal/permission"
)

// access is who may call a method.
type access int

const (
	accessNone   access = iota + 1 // health, reflection
	accessTenant                   // a tenant API key
	accessAdmin                    // the admin key
	accessEither                   // a tenant API key or the admin key
)

// rule is one method's access rule: who may call, and the permission a
// tenant API key must hold.
type rule struct {
	who        access
	permission string
	deprecated string // also admitted, with PermissionDeprecatedHeader
	// onBehalfOf names the request field giving the tenant the admin key may
	// call this tenant method for (Access.admin_on_behalf_of; onbehalf.go).
	onBehalfOf protoreflect.Name
}

// PermissionDeprecatedHeader names, on an answer, the deprecated permission
// that admitted the key (Access.deprecated_permission): the key should be
// re-granted the method's permission. HTTP: X-Cycles-Permission-Deprecated.
const PermissionDeprecatedHeader = "x-cycles-permission-deprecated"

// IntrospectMethod names the credential introspection (AuthService.Introspect,
// GET /v1/auth/introspect): any valid key may ask who it is.
const IntrospectMethod = cyclesv1.AuthService_Introspect_FullMethodName

// accessOf is the rule of a full method name, read from the cycles.v1.access
// option of the method's descriptor (proto/cycles/v1/access.proto). A method
// without the option, or one no descriptor names, needs the admin key, so a
// new RPC is never accidentally public. Health and reflection, which are not
// ours to annotate, are public.
func accessOf(fullMethod string) rule {
	if strings.HasPrefix(fullMethod, "/grpc.health.v1.Health/") || strings.HasPrefix(fullMethod, "/grpc.reflection.") {
		return rule{who: accessNone}
	}
	if r, ok := accessTable()[fullMethod]; ok {
		return r
	}
	return rule{who: accessAdmin}
}

// accessTable maps every method of every cycles.v1 service in the
// registered descriptors to its rule; built once.
var accessTable = sync.OnceValue(func() map[string]rule {
	out := map[string]rule{}
	for full, md := range contract.Methods() {
		out[full] = ruleOf(md)
	}
	return out
})

// ruleOf reads one method's option; absent or unspecified is admin only.
func ruleOf(md protoreflect.MethodDescriptor) rule {
	opts := md.Options()
	if opts == nil || !proto.HasExtension(opts, cyclesv1.E_Access) {
		return rule{who: accessAdmin}
	}
	a, _ := proto.GetExtension(opts, cyclesv1.E_Access).(*cyclesv1.Access)
	r := rule{permission: a.GetPermission(), deprecated: a.GetDeprecatedPermission(),
		onBehalfOf: protoreflect.Name(a.GetAdminOnBehalfOf())}
	switch a.GetCaller() {
	case cyclesv1.Caller_CALLER_PUBLIC:
		r.who = accessNone
	case cyclesv1.Caller_CALLER_TENANT:
		r.who = accessTenant
	case cyclesv1.Caller_CALLER_EITHER:
		r.who = accessEither
	default:
		r.who = accessAdmin
	}
	return r
}

// authorize refuses an API-key caller whose key lacks the method's
// permission, with PERMISSION_DENIED naming it. The admin key holds every
// permission. It runs after authentication on every call, both wires.
func authorize(ctx context.Context, p auth.Principal, fullMethod string) error {
	if p.Admin {
		return nil
	}
	r := accessOf(fullMethod)
	need := r.permission
	if permission.Grants(p.Permissions, need) {
		return nil
	}
	if r.deprecated != "" && permission.Grants(p.Permissions, r.deprecated) {
		_ = grpc.SetHeader(ctx, metadata.Pairs(PermissionDeprecatedHeader, r.deprecated))
		return nil
	}
	return &apierr.Error{
		Code:    apierr.Forbidden,
		Message: "this API key lacks the permission " + need,
		Details: map[string]string{"permission": need},
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
	ctx, err := a.identify(ctx, fullMethod)
	if err != nil {
		return ctx, err
	}
	if p, ok := auth.FromContext(ctx); ok {
		return ctx, authorize(ctx, p, fullMethod)
	}
	return ctx, nil
}

func (a *authenticator) identify(ctx context.Context, fullMethod string) (context.Context, error) {
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
