package events_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/api/eventsapi"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/events"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/server"
	"github.com/cyclesgo/cycles-go/test/grpctest"
	"github.com/cyclesgo/cycles-go/test/redistest"
	"github.com/cyclesgo/cycles-go/test/scripttest"
)

type env struct {
	t      *testing.T
	c      redis.UniversalClient
	svc    *events.Service
	client cyclesv1.EventServiceClient
}

func newEnv(t *testing.T, c redis.UniversalClient, opts events.Options) *env {
	t.Helper()
	return newEnvFor(t, redistest.BackendOn(t, c), opts)
}

// newEnvFor builds the service on one leg of redistest.Backends, its scripts
// sent the way production sends them on that backend.
func newEnvFor(t *testing.T, be redistest.Backend, opts events.Options) *env {
	t.Helper()
	c := be.Client
	ex := scripttest.New(t, be)
	if opts.PollInterval == 0 {
		opts.PollInterval = 5 * time.Millisecond
	}
	if opts.Heartbeat == 0 {
		opts.Heartbeat = time.Hour
	}
	svc := events.New(ex, opts)
	// The production chain (auth, validation, status mapping) in front.
	conn := grpctest.Start(t, server.Services{Events: eventsapi.New(svc)})
	return &env{t: t, c: c, svc: svc, client: cyclesv1.NewEventServiceClient(conn)}
}

func asTenant(ctx context.Context, tenant string) context.Context {
	return grpctest.AsTenant(ctx, tenant)
}

func asAdmin(ctx context.Context) context.Context { return grpctest.AsAdmin(ctx) }

func newTenant() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "ev-" + hex.EncodeToString(b)
}

// ev is one event to append, in the field layout emit_event writes
// (internal/keys records.go).
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
