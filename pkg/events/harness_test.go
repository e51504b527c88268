package events_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/pkg/api/eventsapi"
	"github.com/cyclesgo/cycles-go/pkg/apierr"
	"github.com/cyclesgo/cycles-go/pkg/auth"
	"github.com/cyclesgo/cycles-go/pkg/events"
	"github.com/cyclesgo/cycles-go/pkg/keys"
	"github.com/cyclesgo/cycles-go/pkg/script"
	"github.com/cyclesgo/cycles-go/pkg/validate"
)

// A minimal gRPC server doing what the lead's interceptor chain does for
// EventService: put the principal in the context (here from test metadata
// instead of a verified key), validate every request, map *apierr.Error to a
// status with ErrorInfo.

const (
	mdTenant = "x-test-tenant"
	mdAdmin  = "x-test-admin"
)

func principal(ctx context.Context) context.Context {
	if auth.FirstMetadata(ctx, mdAdmin) != "" {
		return auth.WithPrincipal(ctx, auth.Principal{Admin: true})
	}
	if t := auth.FirstMetadata(ctx, mdTenant); t != "" {
		return auth.WithPrincipal(ctx, auth.Principal{Tenant: t, KeyID: "k1"})
	}
	return ctx
}

func toStatus(err error) error {
	if ae, ok := apierr.As(err); ok {
		return ae.Status("", "").Err()
	}
	return err
}

type validatingStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *validatingStream) Context() context.Context { return s.ctx }

func (s *validatingStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return validate.Message(m.(proto.Message))
}

type env struct {
	t      *testing.T
	c      redis.UniversalClient
	svc    *events.Service
	client cyclesv1.EventServiceClient
}

func newEnv(t *testing.T, c redis.UniversalClient, opts events.Options) *env {
	t.Helper()
	ex, err := script.New(c)
	if err != nil {
		t.Fatal(err)
	}
	if opts.PollInterval == 0 {
		opts.PollInterval = 5 * time.Millisecond
	}
	if opts.Heartbeat == 0 {
		opts.Heartbeat = time.Hour
	}
	svc := events.New(ex, opts)
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if err := validate.Message(req.(proto.Message)); err != nil {
				return nil, toStatus(err)
			}
			resp, err := h(principal(ctx), req)
			return resp, toStatus(err)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			return toStatus(h(srv, &validatingStream{ServerStream: ss, ctx: principal(ss.Context())}))
		}),
	)
	cyclesv1.RegisterEventServiceServer(srv, eventsapi.New(svc))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &env{t: t, c: c, svc: svc, client: cyclesv1.NewEventServiceClient(conn)}
}

func asTenant(ctx context.Context, tenant string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, mdTenant, tenant)
}

func asAdmin(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, mdAdmin, "yes")
}

func newTenant() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "ev-" + hex.EncodeToString(b)
}

// ev is one event to append, in the field layout emit_event writes
// (pkg/keys records.go).
type ev struct {
	Type, Cat, Scope, Data string
	// ID is an explicit stream id ("" = "*").
	ID string
}

// appendEvent appends e to tenant's stream and returns its stream id.
func (e *env) appendEvent(tenant string, x ev) string {
	e.t.Helper()
	if x.Cat == "" {
		x.Cat = "budget"
	}
	if x.Type == "" {
		x.Type = "budget.exhausted"
	}
	if x.Data == "" {
		x.Data = `{"remaining":"0"}`
	}
	if x.ID == "" {
		x.ID = "*"
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	id, err := e.c.XAdd(context.Background(), &redis.XAddArgs{
		Stream: keys.Tenant(tenant).Events(), ID: x.ID,
		Values: []any{"id", "evt_" + hex.EncodeToString(b), "type", x.Type, "cat", x.Cat,
			"ts", strconv.FormatInt(time.Now().UnixMilli(), 10), "scope", x.Scope, "actor", "api_key",
			"key_id", "k1", "req", "r1", "trace", "0123456789abcdef0123456789abcdef", "src", "cyclesd", "data", x.Data},
	}).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	return id
}

// recvEvents reads n events from a watch (skipping heartbeats).
func recvEvents(t *testing.T, s cyclesv1.EventService_WatchEventsClient, n int) []*cyclesv1.Event {
	t.Helper()
	out := make([]*cyclesv1.Event, 0, n)
	for len(out) < n {
		m, err := s.Recv()
		if err != nil {
			t.Fatalf("after %d of %d events: %v", len(out), n, err)
		}
		if e := m.GetEvent(); e != nil {
			out = append(out, e)
		}
	}
	return out
}

// watch opens a watch (for START_NOW, callers that must not race the start
// wait with waitActive).
func (e *env) watch(ctx context.Context, req *cyclesv1.WatchEventsRequest) cyclesv1.EventService_WatchEventsClient {
	e.t.Helper()
	s, err := e.client.WatchEvents(ctx, req)
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

func reasonOf(err error) apierr.Code {
	code, _, _ := apierr.FromStatus(err)
	return code
}

var errTimeout = errors.New("timeout")

// recvErr waits for the stream's terminal error.
func recvErr(s cyclesv1.EventService_WatchEventsClient, within time.Duration) error {
	done := make(chan error, 1)
	go func() {
		for {
			if _, err := s.Recv(); err != nil {
				done <- err
				return
			}
		}
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(within):
		return errTimeout
	}
}

// must returns a function that unwraps (v, err), failing the test on err:
// must[T](t)(call()).
func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}
