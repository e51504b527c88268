package server

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/ratelimit"
	"github.com/cyclesgo/cycles-go/test/grpctest/bufnet"
	"github.com/cyclesgo/cycles-go/test/redistest"
	"github.com/cyclesgo/cycles-go/test/scripttest"
)

// guardRuntime answers Decide, and fails GetBalances with a budget error, so
// the test can tell throttling from budget exhaustion.
type guardRuntime struct {
	cyclesv1.UnimplementedRuntimeServiceServer
}

func (guardRuntime) Decide(context.Context, *cyclesv1.DecideRequest) (*cyclesv1.DecideResponse, error) {
	return &cyclesv1.DecideResponse{Decision: cyclesv1.Decision_DECISION_ALLOW}, nil
}

func (guardRuntime) GetBalances(ctx context.Context, _ *cyclesv1.GetBalancesRequest) (*cyclesv1.GetBalancesResponse, error) {
	return nil, apierr.New(apierr.BudgetExceeded, "budget exhausted").Status("", "").Err()
}

// clockedLimiter is a limiter on the embedded store, whose clock (Lua TIME)
// the test sets.
func clockedLimiter(t *testing.T, start time.Time) (*ratelimit.Limiter, *miniredis.Miniredis) {
	t.Helper()
	c, mr := redistest.Clocked(t, start)
	ex := scripttest.On(t, c)
	return ratelimit.New(ex, ratelimit.Options{}), mr
}

// guardServer is a tiny gRPC server over bufconn: an auth stand-in puts the
// principal named by metadata "test-key-id" in the context (as the auth
// interceptor does), then RateLimitGuard runs.
func guardServer(t *testing.T, l *ratelimit.Limiter, cfg ratelimit.GuardConfig) cyclesv1.RuntimeServiceClient {
	t.Helper()
	fakeAuth := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if id := auth.FirstMetadata(ctx, "test-key-id"); id != "" {
			ctx = auth.WithPrincipal(ctx, auth.Principal{Tenant: "acme", KeyID: id})
		}
		return h(ctx, req)
	}
	s := grpc.NewServer(grpc.ChainUnaryInterceptor(fakeAuth, RateLimitGuard(l, cfg)))
	cyclesv1.RegisterRuntimeServiceServer(s, guardRuntime{})
	lis := bufconn.Listen(1 << 20)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return cyclesv1.NewRuntimeServiceClient(bufnet.Dial(t, lis))
}

func asKey(id string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "test-key-id", id)
}

// The guard throttles per API key: over the limit a call is
// RESOURCE_EXHAUSTED with reason LIMIT_EXCEEDED, a RetryInfo delay and the
// rate headers; a budget refusal from the handler stays FAILED_PRECONDITION;
// calls without an API key pass. (Which checks run, per method and per key,
// is internal/ratelimit's TestGuard*.)
func TestRateLimitGuard(t *testing.T) {
	t0 := time.UnixMilli(1_800_000_000_000)
	lim, mr := clockedLimiter(t, t0)
	p, err := lim.CreatePolicy(context.Background(), ratelimit.Policy{Name: "guard-test", Algorithm: ratelimit.SlidingLog, Limit: 2, WindowMs: 60_000})
	if err != nil {
		t.Fatal(err)
	}
	client := guardServer(t, lim, ratelimit.GuardConfig{Policy: p.Name})

	for i := 0; i < 2; i++ {
		var hdr metadata.MD
		if _, err := client.Decide(asKey("k1"), &cyclesv1.DecideRequest{}, grpc.Header(&hdr)); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if got := hdr.Get(RateLimitRemainingHeader); len(got) != 1 || got[0] != []string{"1", "0"}[i] {
			t.Fatalf("call %d: %s = %v", i, RateLimitRemainingHeader, got)
		}
		if got := hdr.Get(RateLimitHeader); len(got) != 1 || got[0] != "2" {
			t.Fatalf("call %d: %s = %v", i, RateLimitHeader, got)
		}
	}
	mr.SetTime(t0.Add(15 * time.Second))
	var hdr metadata.MD
	_, err = client.Decide(asKey("k1"), &cyclesv1.DecideRequest{}, grpc.Header(&hdr))
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("3rd call: %v, want RESOURCE_EXHAUSTED", err)
	}
	code, md, ok := apierr.FromStatus(err)
	if !ok || code != apierr.LimitExceeded || md["policy"] != p.Name || md["retry_after_ms"] != "45000" {
		t.Fatalf("ErrorInfo: %v %v", code, md)
	}
	var retry *errdetails.RetryInfo
	for _, d := range st.Details() {
		if r, ok := d.(*errdetails.RetryInfo); ok {
			retry = r
		}
	}
	if retry == nil || retry.GetRetryDelay().AsDuration() != 45*time.Second {
		t.Fatalf("RetryInfo = %v, want 45s (the first hit expires at t=60s)", retry)
	}
	if got := hdr.Get(RetryAfterHeader); len(got) != 1 || got[0] != "45" {
		t.Fatalf("retry-after header %v", got)
	}

	// Another API key has its own budget of calls.
	if _, err := client.Decide(asKey("k2"), &cyclesv1.DecideRequest{}); err != nil {
		t.Fatalf("k2: %v", err)
	}
	// Budget exhaustion is not throttling.
	_, err = client.GetBalances(asKey("k3"), &cyclesv1.GetBalancesRequest{})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("budget error: %v, want FAILED_PRECONDITION", err)
	}
	if c, _, _ := apierr.FromStatus(err); c != apierr.BudgetExceeded {
		t.Fatalf("budget reason %v", c)
	}
	// No principal (e.g. the admin): not guarded.
	for i := 0; i < 5; i++ {
		if _, err := client.Decide(context.Background(), &cyclesv1.DecideRequest{}); err != nil {
			t.Fatalf("unauthenticated stand-in call: %v", err)
		}
	}
}
