// Package grpctest serves handlers in tests through the real cyclesd
// interceptor chain (internal/server: request id, logging, status mapping,
// recovery, deadline, auth, guard, validation) over an in-memory connection.
//
// Callers authenticate with AsTenant (a test API key the Verifier maps to the
// tenant) or AsAdmin (the admin key); everything else is production code.
package grpctest

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/test/bufconn"

	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/permission"
	"github.com/cyclesgo/cycles-go/internal/server"
	"github.com/cyclesgo/cycles-go/test/grpctest/bufnet"
)

// AdminKey is the admin key of servers started by Start.
const AdminKey = "grpctest-admin-key-0123456789"

// testKeyPrefix marks test API keys: "test-key:<tenant>".
const testKeyPrefix = "test-key:"

// Verifier accepts the test API keys made by AsTenant.
type Verifier struct{}

// VerifyAPIKey maps "test-key:<tenant>" to that tenant (key id "test") with
// the permissions of a key stored before keys had permissions
// (permission.Legacy), and "test-key:<tenant>:<p1>,<p2>" (KeyWith) to that
// tenant holding exactly p1, p2 ("" for none).
func (Verifier) VerifyAPIKey(_ context.Context, presented string) (auth.Principal, error) {
	rest, ok := strings.CutPrefix(presented, testKeyPrefix)
	tenant, perms, narrowed := strings.Cut(rest, ":")
	if ok && auth.ValidTenantID(tenant) {
		p := auth.Principal{Tenant: tenant, KeyID: "test", Permissions: permission.Legacy}
		if narrowed {
			p.Permissions = nil
			if perms != "" {
				p.Permissions = strings.Split(perms, ",")
			}
		}
		return p, nil
	}
	return auth.Principal{}, apierr.New(apierr.Unauthorized, "unknown API key")
}

// APIKey is the test API key of tenant.
func APIKey(tenant string) string { return testKeyPrefix + tenant }

// KeyWith is a test API key of tenant holding exactly perms.
func KeyWith(tenant string, perms ...string) string {
	return testKeyPrefix + tenant + ":" + strings.Join(perms, ",")
}

// AsTenant authenticates ctx's calls as tenant.
func AsTenant(ctx context.Context, tenant string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, auth.APIKeyHeader, APIKey(tenant))
}

// AsAdmin authenticates ctx's calls with the admin key.
func AsAdmin(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, auth.AdminKeyHeader, AdminKey)
}

// Option adjusts the server options (e.g. a guard, a meter provider).
type Option func(*server.Options)

// Start serves svcs through the production chain and returns a client
// connection; both are closed at cleanup.
func Start(tb testing.TB, svcs server.Services, opts ...Option) *grpc.ClientConn {
	tb.Helper()
	o := server.Options{Verifier: Verifier{}, AdminKey: AdminKey, RequestTimeout: 5 * time.Second}
	for _, f := range opts {
		f(&o)
	}
	srv := server.New(o, svcs)
	return Serve(tb, srv.GRPC)
}

// Serve serves a custom server (for unit tests of a single interceptor) over
// an in-memory listener and returns a client connection.
func Serve(tb testing.TB, srv *grpc.Server) *grpc.ClientConn {
	tb.Helper()
	lis := bufconn.Listen(1 << 20)
	go func() { _ = srv.Serve(lis) }()
	tb.Cleanup(srv.Stop)
	return bufnet.Dial(tb, lis)
}
