package ratelimitapi

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/pkg/apierr"
	"github.com/cyclesgo/cycles-go/pkg/auth"
	"github.com/cyclesgo/cycles-go/pkg/ratelimit"
	"github.com/cyclesgo/cycles-go/pkg/script"
	"github.com/cyclesgo/cycles-go/pkg/validate"
	"github.com/cyclesgo/cycles-go/test/redistest"
)

// client serves the handler over bufconn behind stand-ins of the lead's
// chain: a principal from metadata "test-tenant" (admin when absent), the
// one validation path, and apierr -> status mapping.
func client(t *testing.T) cyclesv1.RateLimitServiceClient {
	t.Helper()
	ex, err := script.New(redistest.SharedClient(t))
	if err != nil {
		t.Fatal(err)
	}
	chain := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		p := auth.Principal{Admin: true}
		if tn := auth.FirstMetadata(ctx, "test-tenant"); tn != "" {
			p = auth.Principal{Tenant: tn, KeyID: "0123456789abcdef"}
		}
		ctx = auth.WithPrincipal(ctx, p)
		if err := validate.Message(req.(proto.Message)); err != nil {
			return nil, err.(*apierr.Error).Status("", "").Err()
		}
		resp, err := h(ctx, req)
		if ae, ok := apierr.As(err); ok {
			return nil, ae.Status("", "").Err()
		}
		return resp, err
	}
	lis := bufconn.Listen(1 << 20)
	s := grpc.NewServer(grpc.UnaryInterceptor(chain))
	cyclesv1.RegisterRateLimitServiceServer(s, New(ratelimit.New(ex, ratelimit.Options{})))
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return cyclesv1.NewRateLimitServiceClient(conn)
}

func tenant(id string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "test-tenant", id)
}

func TestServiceEndToEnd(t *testing.T) {
	c := client(t)
	ctx := context.Background()
	name := "api-" + randSuffix(t)
	created, err := c.CreatePolicy(ctx, &cyclesv1.CreatePolicyRequest{Policy: &cyclesv1.Policy{
		Name: name, Algorithm: cyclesv1.Algorithm_ALGORITHM_CAPPED_LOG, Limit: 2, WindowMs: 60_000}})
	if err != nil {
		t.Fatal(err)
	}
	if created.GetPolicy().GetCap() != 3 || created.GetPolicy().GetSlackMs() != 6000 {
		t.Fatalf("defaults not resolved: %v", created.GetPolicy())
	}
	// Two tenants with the same key do not share usage; hits default to 1.
	for i := 0; i < 2; i++ {
		r, err := c.Check(tenant("acme"), &cyclesv1.CheckRequest{Policy: name, Key: "user-1"})
		if err != nil || !r.GetAllowed() || r.GetCount() != int64(i+1) {
			t.Fatalf("acme %d: %v %v", i, r, err)
		}
	}
	r, err := c.Check(tenant("acme"), &cyclesv1.CheckRequest{Policy: name, Key: "user-1"})
	if err != nil || r.GetAllowed() || r.GetRetryAfterMs() <= 0 || r.GetRemaining() != 0 {
		t.Fatalf("acme 3rd: %v %v (a denial is a response, not an error)", r, err)
	}
	if r, err := c.Check(tenant("globex"), &cyclesv1.CheckRequest{Policy: name, Key: "user-1", Hits: 2}); err != nil || !r.GetAllowed() {
		t.Fatalf("globex: %v %v", r, err)
	}
	in, err := c.Inspect(tenant("acme"), &cyclesv1.InspectRequest{Policy: name, Key: "user-1"})
	if err != nil || in.GetCount() != 2 || in.GetMemoryUsageBytes() <= 0 || in.GetEncoding() != "listpack" ||
		in.GetTtlMs() <= 0 || in.GetRedisKey() != ratelimit.StateKey(name, "t/acme/user-1") ||
		in.GetAlgorithm() != cyclesv1.Algorithm_ALGORITHM_CAPPED_LOG {
		t.Fatalf("inspect: %v %v", in, err)
	}
	// The admin sees raw keys: the tenant's state is under its namespace.
	in, err = c.Inspect(ctx, &cyclesv1.InspectRequest{Policy: name, Key: "t/globex/user-1"})
	if err != nil || in.GetCount() != 2 {
		t.Fatalf("admin inspect: %v %v", in, err)
	}
	// Bad requests are INVALID_ARGUMENT.
	for _, req := range []proto.Message{
		&cyclesv1.CheckRequest{Policy: name, Key: "a{b"},
		&cyclesv1.CheckRequest{Policy: name, Key: "k", Hits: -1},
	} {
		_, err := c.Check(ctx, req.(*cyclesv1.CheckRequest))
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("%v: %v", req, err)
		}
	}
	if _, err := c.Check(ctx, &cyclesv1.CheckRequest{Policy: name, Key: "k", Hits: 3}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("hits > limit: %v", err)
	}
	if _, err := c.CreatePolicy(ctx, &cyclesv1.CreatePolicyRequest{Policy: &cyclesv1.Policy{
		Name: name + "x", Algorithm: cyclesv1.Algorithm_ALGORITHM_TOKEN_BUCKET, Limit: 0, WindowMs: 1000}}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("zero limit: %v", err)
	}
	// CRUD round trip.
	up, err := c.UpdatePolicy(ctx, &cyclesv1.UpdatePolicyRequest{Policy: &cyclesv1.Policy{
		Name: name, Algorithm: cyclesv1.Algorithm_ALGORITHM_PACKED_LOG, Limit: 5, WindowMs: 1000, Shadow: true}})
	if err != nil || up.GetPolicy().GetCap() != 0 || !up.GetPolicy().GetShadow() {
		t.Fatalf("update: %v %v", up, err)
	}
	got, err := c.GetPolicy(ctx, &cyclesv1.GetPolicyRequest{Name: name})
	if err != nil || !proto.Equal(got.GetPolicy(), up.GetPolicy()) {
		t.Fatalf("get: %v %v", got, err)
	}
	list, err := c.ListPolicies(ctx, &cyclesv1.ListPoliciesRequest{})
	if err != nil || len(list.GetPolicies()) == 0 {
		t.Fatalf("list: %v %v", list, err)
	}
	if _, err := c.DeletePolicy(ctx, &cyclesv1.DeletePolicyRequest{Name: name}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetPolicy(ctx, &cyclesv1.GetPolicyRequest{Name: name}); status.Code(err) != codes.NotFound {
		t.Fatalf("get after delete: %v", err)
	}
}
