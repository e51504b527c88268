package admin

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/reqctx"
	"github.com/cyclesgo/cycles-go/internal/telemetry/telemetrytest"
	"github.com/cyclesgo/cycles-go/internal/validate"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
	"github.com/cyclesgo/cycles-go/test/redistest"
	"github.com/cyclesgo/cycles-go/test/scripttest"
)

// env is one service on one Redis with its metrics reader.
type env struct {
	t       testing.TB
	svc     *Service
	rdb     redis.UniversalClient
	metrics *telemetrytest.Reader
	ctx     context.Context
}

// newEnv builds a service on the shared real redis-server.
func newEnv(t testing.TB, opts ...func(*Options)) *env {
	return newEnvOn(t, redistest.SharedClient(t), opts...)
}

func newEnvOn(t testing.TB, rdb redis.UniversalClient, opts ...func(*Options)) *env {
	return newEnvFor(t, redistest.BackendOn(t, rdb), opts...)
}

// newEnvFor builds a service on one leg of redistest.Backends, its scripts
// sent the way production sends them on that backend.
func newEnvFor(t testing.TB, be redistest.Backend, opts ...func(*Options)) *env {
	t.Helper()
	rdb := be.Client
	exec := scripttest.New(t, be)
	r := telemetrytest.New()
	o := Options{MeterProvider: r.Provider}
	for _, f := range opts {
		f(&o)
	}
	ctx := auth.WithPrincipal(context.Background(), auth.Principal{Admin: true})
	ctx = reqctx.WithRequestID(ctx, "req-test")
	ctx = reqctx.WithTraceID(ctx, "0123456789abcdef0123456789abcdef")
	return &env{t: t, svc: New(exec, o), rdb: rdb, metrics: r, ctx: ctx}
}

// newTenantID is a fresh tenant id: tests share one server and isolate by tenant.
func newTenantID(t testing.TB) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "t-" + hex.EncodeToString(b[:])
}

// call runs a request the way the interceptor chain does: validate.Message
// first, then the service method.
func call[Req proto.Message, Resp any](ctx context.Context, req Req, f func(context.Context, Req) (Resp, error)) (Resp, error) {
	if err := validate.Message(req); err != nil {
		var zero Resp
		return zero, err
	}
	return f(ctx, req)
}

// mustCall is call that fails the test on an error.
func mustCall[Req proto.Message, Resp any](t testing.TB, ctx context.Context, req Req, f func(context.Context, Req) (Resp, error)) Resp {
	t.Helper()
	resp, err := call(ctx, req, f)
	if err != nil {
		t.Fatalf("%T: unexpected error: %v", req, err)
	}
	return resp
}

// wantRefused asserts err is a protocol error with the gRPC code and ErrorInfo
// reason, as a client would see them.
func wantRefused(t testing.TB, err error, code codes.Code, reason apierr.Code) *apierr.Error {
	t.Helper()
	if err == nil {
		t.Fatalf("want %v %s, got success", code, reason)
	}
	ae, ok := apierr.As(err)
	if !ok {
		t.Fatalf("want %v %s, got non-protocol error %v", code, reason, err)
	}
	st := ae.Status("req-test", "")
	if st.Code() != code {
		t.Fatalf("gRPC code = %v, want %v (%v)", st.Code(), code, err)
	}
	got, _, ok := apierr.FromStatus(st.Err())
	if !ok || got != reason {
		t.Fatalf("ErrorInfo reason = %q, want %q (%v)", got, reason, err)
	}
	return ae
}

// snapshot captures every key of a tenant (type, serialized value, whether it
// has a TTL) plus its registry entry, so a test can prove a refusal wrote nothing.
func (e *env) snapshot(tenant string) map[string]string {
	e.t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	pattern := keys.Tenant(tenant).Prefix() + "*"
	var cursor uint64
	for {
		ks, next, err := e.rdb.Scan(ctx, cursor, pattern, 500).Result()
		if err != nil {
			e.t.Fatal(err)
		}
		for _, k := range ks {
			out[k] = e.describe(k)
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	score, err := e.rdb.ZScore(ctx, keys.Tenants, tenant).Result()
	switch {
	case errors.Is(err, redis.Nil):
		out["registry"] = "absent"
	case err != nil:
		e.t.Fatal(err)
	default:
		out["registry"] = fmt.Sprint(score)
	}
	return out
}

// describe renders one key's full content (DUMP is not portable to the
// embedded store, so read by type).
func (e *env) describe(k string) string {
	ctx := context.Background()
	typ := e.rdb.Type(ctx, k).Val()
	ttl := e.rdb.PTTL(ctx, k).Val() > 0
	var v any
	switch typ {
	case "hash":
		v = e.rdb.HGetAll(ctx, k).Val()
	case "zset":
		v = e.rdb.ZRangeWithScores(ctx, k, 0, -1).Val()
	case "string":
		v = e.rdb.Get(ctx, k).Val()
	case "stream":
		v = e.rdb.XRange(ctx, k, "-", "+").Val()
	default:
		v = "?"
	}
	b, _ := json.Marshal(v)
	return fmt.Sprintf("%s ttl=%v %s", typ, ttl, b)
}

// unchanged asserts the tenant's keys equal a snapshot.
func (e *env) unchanged(tenant string, before map[string]string) {
	e.t.Helper()
	after := e.snapshot(tenant)
	if len(after) != len(before) {
		e.t.Fatalf("keys changed:\nbefore %v\nafter  %v", slices.Sorted(maps.Keys(before)), slices.Sorted(maps.Keys(after)))
	}
	for k, v := range before {
		if after[k] != v {
			e.t.Fatalf("key %s changed:\nbefore %s\nafter  %s", k, v, after[k])
		}
	}
}

// event is one entry of a tenant stream.
type event struct {
	ID, Type, Category, Scope, Actor, Request, Trace string
	Data                                             map[string]any
}

// events reads a tenant's whole event stream.
func (e *env) events(tenant string) []event {
	e.t.Helper()
	msgs, err := e.rdb.XRange(context.Background(), keys.Tenant(tenant).Events(), "-", "+").Result()
	if err != nil {
		e.t.Fatal(err)
	}
	out := make([]event, 0, len(msgs))
	for _, m := range msgs {
		s := func(k string) string { v, _ := m.Values[k].(string); return v }
		ev := event{ID: s("id"), Type: s("type"), Category: s("cat"), Scope: s("scope"), Actor: s("actor"), Request: s("req"), Trace: s("trace")}
		d := json.NewDecoder(strings.NewReader(s("data")))
		d.UseNumber()
		if err := d.Decode(&ev.Data); err != nil {
			e.t.Fatalf("event %s data %q: %v", ev.Type, s("data"), err)
		}
		out = append(out, ev)
	}
	return out
}

// eventTypes lists the types of events, in order.
func eventTypes(evs []event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.Type
	}
	return out
}

// budgetHash reads a budget hash, its packed balance spelled out per field
// (ledgertest.BalanceFields).
func (e *env) budgetHash(tenant, scopePath, unit string) map[string]string {
	e.t.Helper()
	m, err := e.rdb.HGetAll(context.Background(), keys.Tenant(tenant).Budget(scopePath, unit)).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	return ledgertest.BalanceFields(m)
}

// checkInvariant asserts remaining = allocated - spent - reserved - debt on
// the raw hash strings with math/big (no int64 arithmetic that could wrap).
func (e *env) checkInvariant(tenant, scopePath, unit string) {
	e.t.Helper()
	h := e.budgetHash(tenant, scopePath, unit)
	n := func(f string) *big.Int {
		v, ok := new(big.Int).SetString(h[f], 10)
		if !ok {
			e.t.Fatalf("budget field %s = %q is not an integer", f, h[f])
		}
		return v
	}
	want := new(big.Int).Sub(n("allocated"), n("spent"))
	want.Sub(want, n("reserved"))
	want.Sub(want, n("debt"))
	if want.Cmp(n("remaining")) != 0 {
		e.t.Fatalf("ledger invariant broken: remaining %s != allocated %s - spent %s - reserved %s - debt %s",
			h["remaining"], h["allocated"], h["spent"], h["reserved"], h["debt"])
	}
}

// fakeReleaser records calls and releases from a fixed plan.
type fakeReleaser struct {
	mu    sync.Mutex
	plan  []int // released per call; more while the plan lasts
	err   error // returned once by the next call, then cleared
	calls []string
}

func (f *fakeReleaser) ReleaseForTenantClose(ctx context.Context, tenant string, batch int) (int, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf("%s/%d", tenant, batch))
	if f.err != nil {
		err := f.err
		f.err = nil
		return 0, true, err
	}
	if len(f.plan) == 0 {
		return 0, false, nil
	}
	n := f.plan[0]
	f.plan = f.plan[1:]
	return n, len(f.plan) > 0, nil
}

// redisZ is a lex-index member (score 0).
func redisZ(member string) redis.Z { return redis.Z{Score: 0, Member: member} }

// localKeyID is the id a key is stored under inside its tenant, from the
// public id answers carry (auth.PublicKeyID); a local id is returned as is.
func localKeyID(id string) string {
	if _, local, ok := auth.SplitKeyID(id); ok {
		return local
	}
	return id
}

// refusal is a request the service must refuse with the gRPC code and
// ErrorInfo reason, writing nothing (refusedUnchanged).
type refusal[Req proto.Message] struct {
	name   string
	req    Req
	code   codes.Code
	reason apierr.Code
}

// tenantRequest is a request naming its tenant.
type tenantRequest interface {
	proto.Message
	GetTenantId() string
}

// refuseEach runs refusedUnchanged for each case as a subtest, on the
// tenant its request names.
func refuseEach[Req tenantRequest, Resp any](e *env, t *testing.T, cases []refusal[Req], f func(context.Context, Req) (Resp, error)) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			refusedUnchanged(e, t, tc.req.GetTenantId(), tc.req, f, tc.code, tc.reason)
		})
	}
}

// refusedUnchanged calls f with req as a client would (call) and asserts the
// refusal carries the gRPC code and ErrorInfo reason and that tenant's keys
// and registry entry are exactly as before: a refusal writes nothing. It
// returns the error for checks of its details.
func refusedUnchanged[Req proto.Message, Resp any](e *env, t testing.TB, tenant string, req Req, f func(context.Context, Req) (Resp, error), code codes.Code, reason apierr.Code) *apierr.Error {
	t.Helper()
	before := e.snapshot(tenant)
	_, err := call(e.ctx, req, f)
	ae := wantRefused(t, err, code, reason)
	e.unchanged(tenant, before)
	return ae
}

// listRequest is an admin list request: a page size and a cursor field.
type listRequest interface {
	proto.Message
	GetLimit() int32
}

// listPage is an admin list answer.
type listPage interface {
	GetHasMore() bool
	GetNextCursor() string
}

// listAll follows next_cursor from req to the last page and returns the
// items of every page (items picks them) and each page's size. A page over
// the request's limit, a cursor without has_more or a listing that does not
// end fails the test.
func listAll[Req listRequest, Resp listPage, T any](e *env, req Req, list func(context.Context, Req) (Resp, error), items func(Resp) []T) (all []T, pages []int) {
	e.t.Helper()
	cursor := req.ProtoReflect().Descriptor().Fields().ByName("cursor")
	for i := 0; ; i++ {
		if i > 200 {
			e.t.Fatal("listing does not end")
		}
		resp := mustCall(e.t, e.ctx, req, list)
		got := items(resp)
		if req.GetLimit() > 0 && len(got) > int(req.GetLimit()) {
			e.t.Fatalf("page of %d over limit %d", len(got), req.GetLimit())
		}
		all, pages = append(all, got...), append(pages, len(got))
		if !resp.GetHasMore() {
			if resp.GetNextCursor() != "" {
				e.t.Fatalf("next_cursor without has_more: %v", resp)
			}
			return all, pages
		}
		req.ProtoReflect().Set(cursor, protoreflect.ValueOfString(resp.GetNextCursor()))
	}
}

// runUntilCleanup runs the background loop run (a service's Watch or Run
// method) until the test ends, then cancels it and waits for it: an error
// it returns fails the test.
func runUntilCleanup(t *testing.T, name string, run func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: %v", name, err)
		}
	})
}
