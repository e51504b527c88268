package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/permission"
	"github.com/cyclesgo/cycles-go/internal/telemetry/telemetrytest"
	"github.com/cyclesgo/cycles-go/test/errtest"
	"github.com/cyclesgo/cycles-go/test/grpctest/bufnet"
)

// payloadCounter counts request messages the server read (stats InPayload).
type payloadCounter struct{ n atomic.Int64 }

func (p *payloadCounter) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (p *payloadCounter) HandleRPC(_ context.Context, s stats.RPCStats) {
	if _, ok := s.(*stats.InPayload); ok {
		p.n.Add(1)
	}
}
func (p *payloadCounter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (p *payloadCounter) HandleConn(context.Context, stats.ConnStats) {}

// localVerifier knows "cached-key" from memory and "store-key" only from the
// store (like admin.Service with its caches).
type localVerifier struct{ storeCalls atomic.Int64 }

func (v *localVerifier) VerifyAPIKey(_ context.Context, presented string) (auth.Principal, error) {
	v.storeCalls.Add(1)
	if presented == "store-key" || presented == "cached-key" {
		return auth.Principal{Tenant: "acme", KeyID: presented, Permissions: permission.Legacy}, nil
	}
	return auth.Principal{}, apierr.New(apierr.Unauthorized, "invalid API key")
}

func (v *localVerifier) VerifyAPIKeyLocally(_ context.Context, presented string) (auth.Principal, bool, error) {
	switch {
	case presented == "cached-key":
		return auth.Principal{Tenant: "acme", KeyID: presented, Permissions: permission.Legacy}, true, nil
	case strings.HasPrefix(presented, "malformed"):
		return auth.Principal{}, true, apierr.New(apierr.Unauthorized, "invalid API key")
	}
	return auth.Principal{}, false, nil
}

type limitEnv struct {
	conn     *grpc.ClientConn
	lis      *bufconn.Listener
	rt       *fakeRuntime
	payloads *payloadCounter
	metrics  *telemetrytest.Reader
	verifier *localVerifier
}

func startLimited(t *testing.T, lim Limits, svcs Services) *limitEnv {
	t.Helper()
	e := &limitEnv{rt: &fakeRuntime{}, payloads: &payloadCounter{}, metrics: telemetrytest.New(), verifier: &localVerifier{}}
	if svcs.Runtime == nil {
		svcs.Runtime = e.rt
	}
	svcs.Admin = fakeAdmin{}
	srv := New(Options{
		Verifier: e.verifier, AdminKey: adminKey, RequestTimeout: time.Second,
		MeterProvider: e.metrics.Provider, Limits: lim,
		ServerOptions: []grpc.ServerOption{grpc.StatsHandler(e.payloads)},
	}, svcs)
	e.lis = bufconn.Listen(1 << 20)
	go func() { _ = srv.Serve(e.lis) }()
	t.Cleanup(func() { srv.Stop(time.Second) })
	e.conn = e.dial(t)
	return e
}

func (e *limitEnv) dial(t *testing.T) *grpc.ClientConn { return bufnet.Dial(t, e.lis) }

// bigGet is a runtime request of about n bytes (under the global receive limit).
func bigGet(n int) *cyclesv1.GetReservationRequest {
	return &cyclesv1.GetReservationRequest{ReservationId: strings.Repeat("r", n)}
}

func TestPreAuthRefusesBeforeTheBodyIsRead(t *testing.T) {
	// 40 refusals in a row on one connection: the connection guard would
	// close it at the 16th (TestConnGuardClosesAConnectionOfRefusals); this
	// test is about each refusal's answer.
	e := startLimited(t, Limits{PreAuth: PreAuthLimits{AuthFailBurst: 5, AuthFailRate: 1e-9}, RefusedStreamsPerConn: 1000}, Services{})
	rt := cyclesv1.NewRuntimeServiceClient(e.conn)
	adm := cyclesv1.NewAdminServiceClient(e.conn)
	body := bigGet(512 << 10)
	calls := []struct {
		name string
		call func() error
	}{
		{"no key", func() error { return errtest.ErrOf(rt.GetReservation(context.Background(), body)) }},
		{"malformed key", func() error { return errtest.ErrOf(rt.GetReservation(withMD(auth.APIKeyHeader, "malformed-1"), body)) }},
		{"wrong admin key", func() error {
			return errtest.ErrOf(adm.GetTenant(withMD(auth.AdminKeyHeader, "wrong-admin-key-0123456789"), &cyclesv1.GetTenantRequest{TenantId: strings.Repeat("t", 512<<10)}))
		}},
		{"API key on an admin method", func() error {
			return errtest.ErrOf(adm.GetTenant(withMD(auth.APIKeyHeader, "cached-key"), &cyclesv1.GetTenantRequest{TenantId: "acme"}))
		}},
	}
	refused := 0
	for round := 0; round < 10; round++ {
		for _, c := range calls {
			err := c.call()
			switch status.Code(err) {
			case codes.Unauthenticated, codes.ResourceExhausted:
				refused++
			default:
				t.Fatalf("%s: %v, want UNAUTHENTICATED or RESOURCE_EXHAUSTED", c.name, err)
			}
		}
	}
	if n := e.payloads.n.Load(); n != 0 {
		t.Fatalf("the server read %d request bodies of refused calls", n)
	}
	if n := e.metrics.Sum(t, "cycles.rpc.preauth_refusals"); n != int64(refused) {
		t.Fatalf("preauth_refusals = %d, want %d", n, refused)
	}
	// After 5 failures the peer is throttled: RESOURCE_EXHAUSTED with RetryInfo.
	if n := e.metrics.Sum(t, "cycles.rpc.preauth_refusals", attribute.String("reason", "auth_throttled")); n != int64(refused-5) {
		t.Fatalf("auth_throttled refusals = %d, want %d", n, refused-5)
	}
	// A throttled peer still gets in with a key known good from memory...
	if _, err := rt.GetReservation(withMD(auth.APIKeyHeader, "cached-key"), &cyclesv1.GetReservationRequest{ReservationId: "r1"}); err != nil {
		t.Fatalf("cached key from a throttled peer: %v", err)
	}
	// ...but nothing that needs a store lookup, which is not even attempted.
	_, err := rt.GetReservation(withMD(auth.APIKeyHeader, "store-key"), &cyclesv1.GetReservationRequest{ReservationId: "r1"})
	if status.Code(err) != codes.ResourceExhausted || reasonOf(t, err) != apierr.LimitExceeded {
		t.Fatalf("store key from a throttled peer: %v", err)
	}
	if n := e.verifier.storeCalls.Load(); n != 0 {
		t.Fatalf("%d store verifications for refused calls", n)
	}
	// And a call without a key is refused as throttled, before anything else.
	if _, err := rt.GetReservation(context.Background(), &cyclesv1.GetReservationRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("no key from a throttled peer: %v", err)
	}
}

func TestPreAuthPassesUnknownKeysToTheStoreOnce(t *testing.T) {
	e := startLimited(t, Limits{}, Services{})
	rt := cyclesv1.NewRuntimeServiceClient(e.conn)
	if _, err := rt.GetReservation(withMD(auth.APIKeyHeader, "store-key"), &cyclesv1.GetReservationRequest{ReservationId: "r1"}); err != nil {
		t.Fatal(err)
	}
	if e.rt.seen.Tenant != "acme" || e.rt.seen.KeyID != "store-key" {
		t.Fatalf("principal = %+v", e.rt.seen)
	}
	if n := e.verifier.storeCalls.Load(); n != 1 {
		t.Fatalf("store verifications = %d, want 1", n)
	}
	// A key resolved by the tap is not verified again by the interceptor.
	if _, err := rt.GetReservation(withMD(auth.APIKeyHeader, "cached-key"), &cyclesv1.GetReservationRequest{ReservationId: "r1"}); err != nil {
		t.Fatal(err)
	}
	if n := e.verifier.storeCalls.Load(); n != 1 || e.rt.seen.KeyID != "cached-key" {
		t.Fatalf("store verifications = %d (principal %+v)", n, e.rt.seen)
	}
	// A wrong key that only the store can judge is refused there and counted
	// against the peer.
	_, err := rt.GetReservation(withMD(auth.APIKeyHeader, "guess-1"), &cyclesv1.GetReservationRequest{ReservationId: "r1"})
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("guess: %v", err)
	}
}

func TestPeerGuard(t *testing.T) {
	clock := &testClock{t: time.Unix(1000, 0)}
	g := newPeerGuard(PreAuthLimits{AuthFailBurst: 3, AuthFailRate: 1, UnverifiedPerFailingPeer: 2, UnverifiedKeysPerPeer: 3}, clock.now)
	// A clean peer is not limited on requests with one unverified key (a
	// burst on a cold cache), only on distinct keys in flight.
	var releases []func()
	for i := 0; i < 10; i++ {
		r, limit := g.admitUnverified("a", "key-1")
		if limit != "" {
			t.Fatalf("clean peer refused at %d: %s", i, limit)
		}
		releases = append(releases, r)
	}
	for i := 2; i <= 3; i++ {
		r, limit := g.admitUnverified("a", fmt.Sprintf("key-%d", i))
		if limit != "" {
			t.Fatalf("distinct key %d refused: %s", i, limit)
		}
		releases = append(releases, r)
	}
	if _, limit := g.admitUnverified("a", "key-4"); limit != "unverified_keys_per_peer" {
		t.Fatalf("a 4th distinct key: %q, want unverified_keys_per_peer", limit)
	}
	for _, r := range releases {
		r()
		r() // idempotent
	}
	if len(g.peers) != 0 {
		t.Fatalf("released clean peer still tracked: %v", g.peers)
	}
	for i := 0; i < 3; i++ {
		if _, th := g.throttled("a"); th {
			t.Fatalf("throttled after %d failures", i)
		}
		g.fail("a")
	}
	wait, th := g.throttled("a")
	if !th || wait <= 0 || wait > 2*time.Second {
		t.Fatalf("after 3 failures: throttled %v, wait %v", th, wait)
	}
	if _, th := g.throttled("b"); th {
		t.Fatal("another peer is throttled too")
	}
	// A failing peer gets at most 2 unverified requests in flight.
	r1, l1 := g.admitUnverified("a", "k")
	_, l2 := g.admitUnverified("a", "k")
	_, l3 := g.admitUnverified("a", "k")
	if l1 != "" || l2 != "" || l3 != "unverified_per_failing_peer" {
		t.Fatalf("unverified admissions = %q %q %q, want the third refused", l1, l2, l3)
	}
	r1()
	if _, l := g.admitUnverified("a", "k"); l != "" {
		t.Fatalf("a released slot is not reusable: %s", l)
	}
	// Failures drain at the rate: 1.5 s later the score is 1.5 < 3.
	clock.advance(1500 * time.Millisecond)
	if _, th := g.throttled("a"); th {
		t.Fatal("still throttled after the failures drained")
	}
}

type testClock struct{ t time.Time }

func (c *testClock) now() time.Time          { return c.t }
func (c *testClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func TestOversizeHeaderIsRefusedCheaply(t *testing.T) {
	e := startLimited(t, Limits{}, Services{})
	conn, err := e.lis.DialContext(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	// An 8 MiB header value behind a valid preface, in HEADERS + CONTINUATION.
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range []hpack.HeaderField{
		{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
		{Name: ":path", Value: "/cycles.v1.RuntimeService/GetReservation"}, {Name: ":authority", Value: "buf"},
		{Name: "content-type", Value: "application/grpc"},
		{Name: "x-cycles-api-key", Value: strings.Repeat("k", 8<<20)},
	} {
		_ = enc.WriteField(f)
	}
	// Write the frames from a goroutine: the server may stop reading.
	writeErr := make(chan error, 1)
	go func() {
		b := block.Bytes()
		const chunk = 16 << 10
		err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b[:chunk], EndStream: false, EndHeaders: false})
		for off := chunk; err == nil && off < len(b); off += chunk {
			end := min(off+chunk, len(b))
			err = fr.WriteContinuation(1, end == len(b), b[off:end])
		}
		writeErr <- err
	}()
	// The server answers with RST_STREAM or GOAWAY (or closes), never a response.
	for {
		f, err := fr.ReadFrame()
		if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || err != nil && strings.Contains(err.Error(), "closed") {
			break
		}
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		if _, ok := f.(*http2.RSTStreamFrame); ok {
			break
		}
		if _, ok := f.(*http2.GoAwayFrame); ok {
			break
		}
		if _, ok := f.(*http2.HeadersFrame); ok {
			t.Fatal("the server answered a request with an 8 MiB header")
		}
	}
	if e.payloads.n.Load() != 0 || (e.rt.seen.Tenant != "" || e.rt.seen.KeyID != "") {
		t.Fatal("the oversize request reached the handler")
	}
	// The server still serves.
	if _, err := cyclesv1.NewRuntimeServiceClient(e.dial(t)).GetReservation(withMD(auth.APIKeyHeader, "cached-key"), &cyclesv1.GetReservationRequest{ReservationId: "r1"}); err != nil {
		t.Fatal(err)
	}
}

func TestRuntimeRequestSizeLimit(t *testing.T) {
	e := startLimited(t, Limits{MaxRuntimeRecvBytes: 1024}, Services{})
	rt := cyclesv1.NewRuntimeServiceClient(e.conn)
	_, err := rt.GetReservation(withMD(auth.APIKeyHeader, "cached-key"), bigGet(2048))
	if status.Code(err) != codes.InvalidArgument || reasonOf(t, err) != apierr.InvalidRequest {
		t.Fatalf("oversize runtime request: %v", err)
	}
	if !strings.Contains(err.Error(), "at most 1024") {
		t.Fatalf("message does not state the limit: %v", err)
	}
	// Over the global limit grpc refuses it itself.
	e2 := startLimited(t, Limits{MaxRecvMsgBytes: 4096}, Services{})
	_, err = cyclesv1.NewRuntimeServiceClient(e2.conn).GetReservation(withMD(auth.APIKeyHeader, "cached-key"), bigGet(8192))
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("over the global limit: %v", err)
	}
}

// blockingEvents holds every watch open until the client leaves.
type blockingEvents struct {
	cyclesv1.UnimplementedEventServiceServer
	open atomic.Int64
}

func (b *blockingEvents) WatchEvents(_ *cyclesv1.WatchEventsRequest, ss grpc.ServerStreamingServer[cyclesv1.WatchEventsResponse]) error {
	b.open.Add(1)
	defer b.open.Add(-1)
	if err := ss.Send(&cyclesv1.WatchEventsResponse{}); err != nil {
		return err
	}
	<-ss.Context().Done()
	return nil
}

func TestStreamLimitsPerKeyAndTotal(t *testing.T) {
	ev := &blockingEvents{}
	e := startLimited(t, Limits{StreamsPerKey: 2, StreamsTotal: 3}, Services{Events: ev})
	ec := cyclesv1.NewEventServiceClient(e.conn)
	open := func(md context.Context) (context.CancelFunc, error) {
		ctx, cancel := context.WithCancel(md)
		st, err := ec.WatchEvents(ctx, &cyclesv1.WatchEventsRequest{})
		if err == nil {
			_, err = st.Recv()
		}
		if err != nil {
			cancel()
		}
		return cancel, err
	}
	a := func() context.Context { return withMD(auth.APIKeyHeader, "cached-key") }
	admin := func() context.Context { return withMD(auth.AdminKeyHeader, adminKey) }
	c1, err := open(a())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := open(a()); err != nil {
		t.Fatal(err)
	}
	_, err = open(a())
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "streams_per_key") {
		t.Fatalf("third stream of one key: %v", err)
	}
	if _, err := open(admin()); err != nil {
		t.Fatalf("another key under the total: %v", err)
	}
	_, err = open(admin())
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "streams_total") {
		t.Fatalf("over the total: %v", err)
	}
	// Closing a stream frees its slot.
	c1()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := open(a())
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot never freed: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := e.metrics.Sum(t, "cycles.rpc.streams.refused"); n < 2 {
		t.Fatalf("streams.refused = %d", n)
	}
}

func TestPeerGuardOff(t *testing.T) {
	g := newPeerGuard(PreAuthLimits{AuthFailBurst: -1}, time.Now)
	for i := 0; i < 100; i++ {
		g.fail("a")
	}
	if _, th := g.throttled("a"); th {
		t.Fatal("throttled with tracking off")
	}
	if _, l := g.admitUnverified("a", "k"); l != "" || len(g.peers) != 0 {
		t.Fatal("tracking off still tracks")
	}
}
