package server

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/contract"
	"github.com/cyclesgo/cycles-go/internal/permission"
	"github.com/cyclesgo/cycles-go/internal/telemetry/telemetrytest"
	"github.com/cyclesgo/cycles-go/internal/validate"
	"github.com/cyclesgo/cycles-go/test/errtest"
	"github.com/cyclesgo/cycles-go/test/grpctest/bufnet"
)

const adminKey = "test-admin-key-0123456789"

// fakeVerifier accepts exactly one key.
type fakeVerifier struct{ key, tenant string }

func (f fakeVerifier) VerifyAPIKey(_ context.Context, presented string) (auth.Principal, error) {
	if presented != f.key {
		return auth.Principal{}, apierr.New(apierr.Unauthorized, "unknown key")
	}
	return auth.Principal{Tenant: f.tenant, KeyID: "k1", Permissions: permission.Legacy}, nil
}

// fakeRuntime records the principal and can panic or fail on demand.
type fakeRuntime struct {
	cyclesv1.UnimplementedRuntimeServiceServer
	seen auth.Principal
}

func (f *fakeRuntime) GetReservation(ctx context.Context, r *cyclesv1.GetReservationRequest) (*cyclesv1.GetReservationResponse, error) {
	f.seen, _ = auth.FromContext(ctx)
	switch r.GetReservationId() {
	case "panic":
		panic("boom")
	case "budget":
		return nil, apierr.New(apierr.BudgetExceeded, "not enough").With("scope", "tenant:a")
	case "opaque":
		return nil, errors.New("secret internal detail")
	case "storedown":
		return nil, &apierr.Error{Code: apierr.Unavailable, Message: "budget store unavailable",
			Cause: errors.New("read tcp 127.0.0.1:50000->127.0.0.1:21379: i/o timeout")}
	case "slow":
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return &cyclesv1.GetReservationResponse{Reservation: &cyclesv1.Reservation{ReservationId: r.GetReservationId()}}, nil
}

type fakeAdmin struct {
	cyclesv1.UnimplementedAdminServiceServer
}

func (fakeAdmin) GetTenant(_ context.Context, r *cyclesv1.GetTenantRequest) (*cyclesv1.GetTenantResponse, error) {
	return &cyclesv1.GetTenantResponse{Tenant: &cyclesv1.Tenant{TenantId: r.GetTenantId()}}, nil
}

func start(t *testing.T, rt *fakeRuntime) (*grpc.ClientConn, *Server, *telemetrytest.Reader) {
	conn, srv, metrics, _ := startLogged(t, rt, zap.NewNop())
	return conn, srv, metrics
}

func startLogged(t *testing.T, rt *fakeRuntime, log *zap.Logger) (*grpc.ClientConn, *Server, *telemetrytest.Reader, *zap.Logger) {
	t.Helper()
	metrics := telemetrytest.New()
	srv := New(Options{
		Logger:         log,
		Verifier:       fakeVerifier{key: "good-key", tenant: "acme"},
		AdminKey:       adminKey,
		RequestTimeout: 200 * time.Millisecond,
		MeterProvider:  metrics.Provider,
	}, Services{Runtime: rt, Admin: fakeAdmin{}})
	lis := bufconn.Listen(1 << 20)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(time.Second) })
	return bufnet.Dial(t, lis), srv, metrics, log
}

func withMD(kv ...string) context.Context {
	return metadata.NewOutgoingContext(context.Background(), metadata.Pairs(kv...))
}

func reasonOf(t *testing.T, err error) apierr.Code {
	t.Helper()
	code, _, ok := apierr.FromStatus(err)
	if !ok {
		t.Fatalf("error %v carries no cycles ErrorInfo", err)
	}
	return code
}

func TestAuthRules(t *testing.T) {
	rt := &fakeRuntime{}
	conn, _, _ := start(t, rt)
	runtime := cyclesv1.NewRuntimeServiceClient(conn)
	admin := cyclesv1.NewAdminServiceClient(conn)
	get := &cyclesv1.GetReservationRequest{ReservationId: "r1"}

	cases := []struct {
		name   string
		call   func(ctx context.Context) error
		ctx    context.Context
		code   codes.Code
		reason apierr.Code
	}{
		{"runtime without key", func(ctx context.Context) error { return errtest.ErrOf(runtime.GetReservation(ctx, get)) }, context.Background(), codes.Unauthenticated, apierr.Unauthorized},
		{"runtime with unknown key", func(ctx context.Context) error { return errtest.ErrOf(runtime.GetReservation(ctx, get)) }, withMD(auth.APIKeyHeader, "nope"), codes.Unauthenticated, apierr.Unauthorized},
		// GetReservation's access option lets the admin key call it on the
		// owner's behalf (admin_on_behalf_of: reservation_id): r1 names no owner.
		{"runtime with admin key only", func(ctx context.Context) error { return errtest.ErrOf(runtime.GetReservation(ctx, get)) }, withMD(auth.AdminKeyHeader, adminKey), codes.NotFound, apierr.NotFound},
		{"commit with admin key only", func(ctx context.Context) error {
			return errtest.ErrOf(runtime.CommitReservation(ctx, &cyclesv1.CommitReservationRequest{ReservationId: "r1"}))
		}, withMD(auth.AdminKeyHeader, adminKey), codes.Unauthenticated, apierr.Unauthorized},
		{"list on behalf without tenant", func(ctx context.Context) error {
			return errtest.ErrOf(runtime.ListReservations(ctx, &cyclesv1.ListReservationsRequest{}))
		}, withMD(auth.AdminKeyHeader, adminKey), codes.InvalidArgument, apierr.InvalidRequest},
		{"runtime with tenant key", func(ctx context.Context) error { return errtest.ErrOf(runtime.GetReservation(ctx, get)) }, withMD(auth.APIKeyHeader, "good-key"), codes.OK, ""},
		{"admin without key", func(ctx context.Context) error {
			return errtest.ErrOf(admin.GetTenant(ctx, &cyclesv1.GetTenantRequest{TenantId: "acme"}))
		}, context.Background(), codes.Unauthenticated, apierr.Unauthorized},
		{"admin with tenant key", func(ctx context.Context) error {
			return errtest.ErrOf(admin.GetTenant(ctx, &cyclesv1.GetTenantRequest{TenantId: "acme"}))
		}, withMD(auth.APIKeyHeader, "good-key"), codes.Unauthenticated, apierr.Unauthorized},
		{"admin with wrong admin key", func(ctx context.Context) error {
			return errtest.ErrOf(admin.GetTenant(ctx, &cyclesv1.GetTenantRequest{TenantId: "acme"}))
		}, withMD(auth.AdminKeyHeader, adminKey+"x"), codes.Unauthenticated, apierr.Unauthorized},
		{"admin with admin key", func(ctx context.Context) error {
			return errtest.ErrOf(admin.GetTenant(ctx, &cyclesv1.GetTenantRequest{TenantId: "acme"}))
		}, withMD(auth.AdminKeyHeader, adminKey), codes.OK, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.call(c.ctx)
			if status.Code(err) != c.code {
				t.Fatalf("code = %v (%v), want %v", status.Code(err), err, c.code)
			}
			if c.reason != "" && reasonOf(t, err) != c.reason {
				t.Fatalf("reason = %v, want %v", reasonOf(t, err), c.reason)
			}
		})
	}
	if rt.seen.Tenant != "acme" || rt.seen.KeyID != "k1" {
		t.Fatalf("handler saw principal %+v", rt.seen)
	}
	// On the owner's behalf, the handler runs as the owner with the admin as
	// the actor; a tenant key sent as well decides instead.
	owned := &cyclesv1.GetReservationRequest{ReservationId: "r_acme_" + strings.Repeat("ab", 16)}
	if _, err := runtime.GetReservation(withMD(auth.AdminKeyHeader, adminKey), owned); err != nil {
		t.Fatalf("on behalf: %v", err)
	}
	if want := (auth.Principal{Tenant: "acme", Admin: true}); !reflect.DeepEqual(rt.seen, want) {
		t.Fatalf("on behalf: handler saw %+v, want %+v", rt.seen, want)
	}
	both := withMD(auth.AdminKeyHeader, adminKey, auth.APIKeyHeader, "good-key")
	if _, err := runtime.GetReservation(both, owned); err != nil || rt.seen.Admin || rt.seen.KeyID != "k1" {
		t.Fatalf("both keys: %v, handler saw %+v", err, rt.seen)
	}
}

func TestErrorsMapToStatusWithErrorInfo(t *testing.T) {
	conn, _, metrics := start(t, &fakeRuntime{})
	runtime := cyclesv1.NewRuntimeServiceClient(conn)
	ctx := withMD(auth.APIKeyHeader, "good-key", auth.RequestIDHeader, "req-123")
	cases := []struct {
		id     string
		code   codes.Code
		reason apierr.Code
	}{
		{"budget", codes.FailedPrecondition, apierr.BudgetExceeded},
		{"opaque", codes.Internal, apierr.InternalError},
		{"panic", codes.Internal, apierr.InternalError},
		{"slow", codes.Unavailable, apierr.Unavailable},
		{"bad id with spaces", codes.InvalidArgument, apierr.InvalidRequest},
	}
	for _, c := range cases {
		t.Run(c.id, func(t *testing.T) {
			_, err := runtime.GetReservation(ctx, &cyclesv1.GetReservationRequest{ReservationId: c.id})
			if status.Code(err) != c.code {
				t.Fatalf("code = %v (%v), want %v", status.Code(err), err, c.code)
			}
			reason, md, _ := apierr.FromStatus(err)
			if reason != c.reason {
				t.Fatalf("reason = %v, want %v", reason, c.reason)
			}
			if md["request_id"] != "req-123" {
				t.Fatalf("request_id = %q, want the caller's", md["request_id"])
			}
			if c.id == "opaque" && status.Convert(err).Message() != "INTERNAL_ERROR: internal error" {
				t.Fatalf("internal details leaked: %q", status.Convert(err).Message())
			}
			if c.id == "budget" && md["scope"] != "tenant:a" {
				t.Fatalf("details lost: %v", md)
			}
		})
	}
	if got := metrics.Sum(t, "cycles.rpc.panics"); got != 1 {
		t.Fatalf("panics counter = %d, want 1", got)
	}
}

func TestInvalidInputNamesTheField(t *testing.T) {
	conn, _, _ := start(t, &fakeRuntime{})
	runtime := cyclesv1.NewRuntimeServiceClient(conn)
	_, err := runtime.GetReservation(withMD(auth.APIKeyHeader, "good-key"), &cyclesv1.GetReservationRequest{})
	st := status.Convert(err)
	if st.Code() != codes.InvalidArgument {
		t.Fatalf("code = %v", st.Code())
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetMetadata()["field"] == "reservation_id" {
			return
		}
	}
	t.Fatalf("no ErrorInfo naming field reservation_id in %v", st.Details())
}

func TestHealthFollowsPing(t *testing.T) {
	conn, srv, _ := start(t, &fakeRuntime{})
	hc := healthpb.NewHealthClient(conn)
	up := make(chan bool, 1)
	up <- true
	var alive = true
	ping := func(context.Context) error {
		select {
		case v := <-up:
			alive = v
		default:
		}
		if alive {
			return nil
		}
		return errors.New("down")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go srv.WatchHealth(ctx, ping, 10*time.Millisecond)
	waitFor := func(want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			res, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "cycles.v1.RuntimeService"})
			if err == nil && res.GetStatus() == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("health never became %v (last %v, %v)", want, res.GetStatus(), err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitFor(healthpb.HealthCheckResponse_SERVING)
	up <- false
	waitFor(healthpb.HealthCheckResponse_NOT_SERVING)
	up <- true
	waitFor(healthpb.HealthCheckResponse_SERVING)
}

// TestEveryRequestTypeHasAValidator enforces the one validation path: a new
// RPC without a validator fails here (and is refused at run time).
func TestEveryRequestTypeHasAValidator(t *testing.T) {
	for full, m := range contract.Methods() {
		if !validate.Has(m.Input().FullName()) {
			t.Errorf("%s: no validator for %s", full, m.Input().FullName())
		}
	}
}

func TestAccessOfUnknownMethodNeedsAdmin(t *testing.T) {
	if accessOf("/cycles.v1.NewService/Anything").who != accessAdmin {
		t.Fatal("unknown methods must need the admin key")
	}
	if accessOf("/grpc.health.v1.Health/Check").who != accessNone {
		t.Fatal("health must be open")
	}
}

func TestOneLogLinePerRPCWithoutSecrets(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	conn, _, _, _ := startLogged(t, &fakeRuntime{}, zap.New(core))
	runtime := cyclesv1.NewRuntimeServiceClient(conn)
	ctx := withMD(auth.APIKeyHeader, "good-key", auth.RequestIDHeader, "req-log")
	_, _ = runtime.GetReservation(ctx, &cyclesv1.GetReservationRequest{ReservationId: "budget"})
	var line *observer.LoggedEntry
	for _, e := range logs.All() {
		if e.ContextMap()["grpc.method"] == "GetReservation" {
			e := e
			line = &e
		}
	}
	if line == nil {
		t.Fatalf("no RPC log line; got %v", logs.All())
	}
	f := line.ContextMap()
	want := map[string]string{"grpc.code": "FailedPrecondition", "tenant": "acme", "request_id": "req-log", "reason": "BUDGET_EXCEEDED"}
	for k, v := range want {
		if fmt.Sprint(f[k]) != v {
			t.Errorf("log field %s = %v, want %v (all: %v)", k, f[k], v, f)
		}
	}
	if _, ok := f["grpc.time_ms"]; !ok {
		t.Errorf("no latency field in %v", f)
	}
	for _, e := range logs.All() {
		if strings.Contains(fmt.Sprint(e.ContextMap()), "good-key") || strings.Contains(e.Message, "good-key") {
			t.Fatalf("API key leaked into logs: %v", e)
		}
	}
}
