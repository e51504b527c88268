package ratelimitapi

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/ratelimit"
	"github.com/cyclesgo/cycles-go/internal/server"
	"github.com/cyclesgo/cycles-go/test/grpctest"
	"github.com/cyclesgo/cycles-go/test/scripttest"
)

// client serves the handler behind the production chain.
func client(t *testing.T) cyclesv1.RateLimitServiceClient {
	t.Helper()
	ex := scripttest.Shared(t)
	conn := grpctest.Start(t, server.Services{RateLimit: New(ratelimit.New(ex, ratelimit.Options{}))})
	return cyclesv1.NewRateLimitServiceClient(conn)
}

// tenant calls as tenant id; admin calls with the admin key.
func tenant(id string) context.Context { return grpctest.AsTenant(context.Background(), id) }

func admin() context.Context { return grpctest.AsAdmin(context.Background()) }

func TestServiceEndToEnd(t *testing.T) {
	c := client(t)
	ctx := admin()
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
