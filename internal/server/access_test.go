package server

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/emptypb"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/contract"
	"github.com/cyclesgo/cycles-go/internal/permission"
)

// Every RPC of every cycles.v1 service carries the access option with a
// known caller, and every method a tenant key may call names a Permission
// value (only introspection, which any credential may ask, names none).
func TestEveryRPCIsAnnotated(t *testing.T) {
	n := 0
	for full, md := range contract.Methods() {
		n++
		if !proto.HasExtension(md.Options(), cyclesv1.E_Access) {
			t.Errorf("%s has no (cycles.v1.access) option (see proto/cycles/v1/access.proto)", full)
			continue
		}
		a := proto.GetExtension(md.Options(), cyclesv1.E_Access).(*cyclesv1.Access)
		if a.GetCaller() == cyclesv1.Caller_CALLER_UNSPECIFIED {
			t.Errorf("%s: caller unspecified", full)
		}
		if p := a.GetPermission(); p != "" && !permission.Valid(p) {
			t.Errorf("%s: %q is not a permission", full, p)
		}
		tenantCallable := a.GetCaller() == cyclesv1.Caller_CALLER_TENANT || a.GetCaller() == cyclesv1.Caller_CALLER_EITHER
		if tenantCallable && a.GetPermission() == "" && full != IntrospectMethod {
			t.Errorf("%s: a tenant key may call it but it names no permission", full)
		}
		// admin_on_behalf_of names a string field of the request of a
		// tenant-only method, and onBehalfUnary reads only those two names.
		if f := protoreflect.Name(a.GetAdminOnBehalfOf()); f != "" {
			fd := md.Input().Fields().ByName(f)
			if fd == nil || fd.Kind() != protoreflect.StringKind || a.GetCaller() != cyclesv1.Caller_CALLER_TENANT ||
				(f != "tenant" && f != "reservation_id") {
				t.Errorf("%s: admin_on_behalf_of %q is not the tenant or reservation_id field of a tenant method", full, f)
			}
		}
		if r := accessOf(full); r.permission != a.GetPermission() {
			t.Errorf("%s: table says %q, option %q", full, r.permission, a.GetPermission())
		}
	}
	if n < 40 {
		t.Fatalf("only %d methods found: are the cycles.v1 descriptors registered?", n)
	}
}

// An unannotated method is admin-only (fail closed): the rule of a method
// descriptor without the option.
func TestUnannotatedMethodIsAdminOnly(t *testing.T) {

	if r := ruleOf(unannotated{}); r.who != accessAdmin {
		t.Fatalf("unannotated method: %v, want admin only", r.who)
	}
	if r := accessOf("/cycles.v1.RuntimeService/NoSuchMethod"); r.who != accessAdmin {
		t.Fatalf("unknown method: %v, want admin only", r.who)
	}
}

type unannotated struct{ protoreflect.MethodDescriptor }

func (unannotated) Options() protoreflect.ProtoMessage { return nil }

func TestAuthorize(t *testing.T) {
	create := cyclesv1.RuntimeService_CreateReservation_FullMethodName
	for _, c := range []struct {
		name string
		p    auth.Principal
		ok   bool
	}{
		{"admin", auth.Principal{Admin: true}, true},
		{"holds it", auth.Principal{Tenant: "t", Permissions: []string{"reservations:create"}}, true},
		{"lacks it", auth.Principal{Tenant: "t", Permissions: []string{"balances:read"}}, false},
		{"no permissions", auth.Principal{Tenant: "t"}, false},
		{"admin:write wildcard does not cover a non-write", auth.Principal{Tenant: "t", Permissions: []string{"admin:write"}}, false},
	} {
		err := authorize(context.Background(), c.p, create)
		if (err == nil) != c.ok {
			t.Errorf("%s: err = %v", c.name, err)
		}
	}
}

// permVerifier maps "k:<perm>,<perm>" to tenant "acme" holding exactly those
// permissions ("k:" holds none).
type permVerifier struct{}

func (permVerifier) VerifyAPIKey(_ context.Context, presented string) (auth.Principal, error) {
	rest, ok := strings.CutPrefix(presented, "k:")
	if !ok {
		return auth.Principal{}, apierr.New(apierr.Unauthorized, "unknown API key")
	}
	p := auth.Principal{Tenant: "acme", KeyID: "k"}
	if rest != "" {
		p.Permissions = strings.Split(rest, ",")
	}
	return p, nil
}

// Every RPC through the one chain both wires use (Invoke): a key holding the
// method's permission gets past auth, a key holding every other permission
// is refused with PERMISSION_DENIED naming it, admin-only methods refuse any
// API key, and the admin key passes everywhere but on tenant-only methods.
func TestEveryRPCNeedsItsPermission(t *testing.T) {
	s := New(Options{Verifier: permVerifier{}, AdminKey: "the-admin-key"}, Services{})
	t.Cleanup(func() { s.Stop(0) })
	reached := func(context.Context, any) (any, error) { return &emptypb.Empty{}, nil }
	call := func(method string, req proto.Message, kv ...string) error {
		_, _, err := s.Invoke(context.Background(), method, metadata.Pairs(kv...), req, reached)
		return err
	}
	n := 0
	for method, md := range contract.Methods() {
		mt, err := protoregistry.GlobalTypes.FindMessageByName(md.Input().FullName())
		if err != nil {
			t.Fatal(err)
		}
		req := mt.New().Interface()
		r := accessOf(method)
		n++
		passed := func(err error) bool {
			c := status.Code(err)
			return c != codes.Unauthenticated && c != codes.PermissionDenied
		}
		// A tenant method the admin may call on a tenant's behalf
		// (admin_on_behalf_of) passes the admin key too.
		if err := call(method, req, auth.AdminKeyHeader, "the-admin-key"); (r.who == accessTenant && r.onBehalfOf == "") == passed(err) {
			t.Errorf("%s with the admin key: %v", method, err)
		}
		if r.who == accessAdmin {
			if err := call(method, req, auth.APIKeyHeader, "k:"+strings.Join(permission.All, ",")); status.Code(err) != codes.Unauthenticated {
				t.Errorf("%s (admin only) with an API key holding everything: %v", method, err)
			}
			continue
		}
		if err := call(method, req, auth.APIKeyHeader, "k:"+r.permission); !passed(err) {
			t.Errorf("%s with %q: %v", method, r.permission, err)
		}
		if r.permission == "" {
			continue
		}
		if r.deprecated != "" {
			// The deprecated permission alone admits, and the answer says so.
			_, hdr, err := s.Invoke(context.Background(), method, metadata.Pairs(auth.APIKeyHeader, "k:"+r.deprecated), req, reached)
			if !passed(err) || len(hdr.Get(PermissionDeprecatedHeader)) != 1 || hdr.Get(PermissionDeprecatedHeader)[0] != r.deprecated {
				t.Errorf("%s with the deprecated %q: %v, header %v", method, r.deprecated, err, hdr)
			}
			if _, hdr, _ := s.Invoke(context.Background(), method, metadata.Pairs(auth.APIKeyHeader, "k:"+r.permission), req, reached); len(hdr.Get(PermissionDeprecatedHeader)) != 0 {
				t.Errorf("%s with %q: deprecation header %v", method, r.permission, hdr)
			}
		}
		var others []string
		for _, p := range permission.All {
			if p != r.permission && !permission.Grants([]string{p}, r.permission) &&
				(r.deprecated == "" || !permission.Grants([]string{p}, r.deprecated)) {
				others = append(others, p)
			}
		}
		err = call(method, req, auth.APIKeyHeader, "k:"+strings.Join(others, ","))
		if status.Code(err) != codes.PermissionDenied || errorInfo(err)["permission"] != r.permission {
			t.Errorf("%s without %q: %v (%v)", method, r.permission, err, errorInfo(err))
		}
	}
	if n < 40 {
		t.Fatalf("only %d methods", n)
	}
}

func errorInfo(err error) map[string]string {
	for _, d := range status.Convert(err).Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei.GetMetadata()
		}
	}
	return nil
}
