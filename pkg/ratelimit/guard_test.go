package ratelimit

import (
	"context"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/pkg/apierr"
	"github.com/cyclesgo/cycles-go/pkg/auth"
	"github.com/cyclesgo/cycles-go/test/grpctest"
)

// runtimeStub answers Decide, and fails GetBalances with a budget error, so
// the test can tell throttling from budget exhaustion.
type runtimeStub struct {
	cyclesv1.UnimplementedRuntimeServiceServer
}

func (runtimeStub) Decide(context.Context, *cyclesv1.DecideRequest) (*cyclesv1.DecideResponse, error) {
	return &cyclesv1.DecideResponse{Decision: cyclesv1.Decision_DECISION_ALLOW}, nil
}

func (runtimeStub) GetBalances(ctx context.Context, _ *cyclesv1.GetBalancesRequest) (*cyclesv1.GetBalancesResponse, error) {
	return nil, apierr.New(apierr.BudgetExceeded, "budget exhausted").Status("", "").Err()
}

// guardServer is a tiny gRPC server over bufconn: an auth stand-in puts the
// principal named by metadata "test-key-id" in the context (as the lead's
// auth interceptor does), then the guard runs.
func guardServer(t *testing.T, l *Limiter, cfg GuardConfig) cyclesv1.RuntimeServiceClient {
	t.Helper()
	fakeAuth := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if id := auth.FirstMetadata(ctx, "test-key-id"); id != "" {
			ctx = auth.WithPrincipal(ctx, auth.Principal{Tenant: "acme", KeyID: id})
		}
		return h(ctx, req)
	}
	s := grpc.NewServer(grpc.ChainUnaryInterceptor(fakeAuth, l.UnaryGuard(cfg)))
	cyclesv1.RegisterRuntimeServiceServer(s, runtimeStub{})
	return cyclesv1.NewRuntimeServiceClient(grpctest.Serve(t, s))
}

func asKey(id string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "test-key-id", id)
}

// The guard throttles per API key: over the limit a call is
// RESOURCE_EXHAUSTED with reason LIMIT_EXCEEDED and a RetryInfo delay; a
// budget refusal from the handler stays FAILED_PRECONDITION.
func TestGuardThrottlesPerAPIKey(t *testing.T) {
	e := clocked(t, t0)
	p := e.mustPolicy(t, Policy{Algorithm: SlidingLog, Limit: 2, WindowMs: 60_000})
	client := guardServer(t, e.lim, GuardConfig{Policy: p.Name})

	for i := 0; i < 2; i++ {
		var hdr metadata.MD
		if _, err := client.Decide(asKey("k1"), &cyclesv1.DecideRequest{}, grpc.Header(&hdr)); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if got := hdr.Get(HeaderRemaining); len(got) != 1 || got[0] != []string{"1", "0"}[i] {
			t.Fatalf("call %d: %s = %v", i, HeaderRemaining, got)
		}
	}
	e.at(t0, 15_000)
	var hdr metadata.MD
	_, err := client.Decide(asKey("k1"), &cyclesv1.DecideRequest{}, grpc.Header(&hdr))
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
	if got := hdr.Get(HeaderRetryAfter); len(got) != 1 || got[0] != "45" {
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
	if got := e.tel.Sum(t, "cycles.ratelimit.guard.decisions", attrOutcome("denied")); got != 1 {
		t.Fatalf("guard denials = %d, want 1", got)
	}
	if got := e.tel.Sum(t, "cycles.ratelimit.guard.decisions", attrOutcome("allowed")); got != 4 {
		t.Fatalf("guard allowed = %d, want 4", got)
	}
}

// Per-method policies add a limit per (API key, method); key overrides
// replace the default; a missing policy lets calls through (counted).
func TestGuardMethodAndKeyPolicies(t *testing.T) {
	e := clocked(t, t0)
	wide := e.mustPolicy(t, Policy{Algorithm: TokenBucket, Limit: 100, WindowMs: 60_000})
	decide := e.mustPolicy(t, Policy{Algorithm: PackedLog, Limit: 1, WindowMs: 60_000})
	vip := e.mustPolicy(t, Policy{Algorithm: SlidingWindow, Limit: 1000, WindowMs: 60_000})
	client := guardServer(t, e.lim, GuardConfig{
		Policy:         wide.Name,
		KeyPolicies:    map[string]string{"vip": vip.Name, "broken": "no-such-policy"},
		MethodPolicies: map[string]string{"/cycles.v1.RuntimeService/Decide": decide.Name},
	})
	if _, err := client.Decide(asKey("k1"), &cyclesv1.DecideRequest{}); err != nil {
		t.Fatal(err)
	}
	_, err := client.Decide(asKey("k1"), &cyclesv1.DecideRequest{})
	if code, md, _ := apierr.FromStatus(err); code != apierr.LimitExceeded || md["policy"] != decide.Name {
		t.Fatalf("2nd Decide: %v, want the per-method limit", err)
	}
	// The per-method limit is per key.
	if _, err := client.Decide(asKey("vip"), &cyclesv1.DecideRequest{}); err != nil {
		t.Fatal(err)
	}
	in, err := e.lim.Inspect(context.Background(), vip.Name, APIKeyKey("vip", ""))
	if err != nil || in.Count != 1 {
		t.Fatalf("vip key-wide state: %+v %v", in, err)
	}
	in, err = e.lim.Inspect(context.Background(), wide.Name, APIKeyKey("vip", ""))
	if err != nil || in.Type != "none" {
		t.Fatalf("vip must not use the default policy: %+v %v", in, err)
	}
	if _, err := client.GetBalances(asKey("broken"), &cyclesv1.GetBalancesRequest{}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("missing policy must let the call through: %v", err)
	}
	if got := e.tel.Sum(t, "cycles.ratelimit.guard.skipped"); got != 1 {
		t.Fatalf("guard.skipped = %d", got)
	}
}
