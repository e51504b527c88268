package server

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc/tap"

	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/telemetry"
	"github.com/cyclesgo/cycles-go/internal/telemetry/telemetrytest"
)

func newTestGuard(t *testing.T, lim Limits) (*connGuard, *telemetrytest.Reader) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := telemetrytest.New()
	g := newConnGuard(lis, lim.withDefaults(), telemetry.MustCounter(telemetry.Meter(m.Provider, "test"), "cycles.conn.limit_closures", "test"))
	t.Cleanup(func() { _ = g.Close() })
	return g, m
}

// dial is a client connection to g, closed when t ends.
func dial(t *testing.T, g *connGuard) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", g.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// acceptLater accepts the next connection of g in the background; the
// channel gets it (nil once g is closed).
func acceptLater(g *connGuard) <-chan net.Conn {
	accepted := make(chan net.Conn, 1)
	go func() {
		sc, _ := g.Accept()
		accepted <- sc
	}()
	return accepted
}

// dialAccept dials g and returns the server side.
func dialAccept(t *testing.T, g *connGuard) *guardedConn {
	t.Helper()
	dial(t, g)
	return accept(t, g)
}

// accept is g's next connection, closed when t ends.
func accept(t *testing.T, g *connGuard) *guardedConn {
	t.Helper()
	sc, err := g.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sc.Close() })
	return sc.(*guardedConn)
}

func TestConnGuardEvictsTheIdlestAtTheLimit(t *testing.T) {
	g, m := newTestGuard(t, Limits{MaxConnections: 2})
	used, unused := dialAccept(t, g), dialAccept(t, g)
	used.streamStarted()
	used.streamEnded()
	g.now = func() time.Time { return time.Now().Add(2 * time.Second) } // both quiet for 2 s
	third := dialAccept(t, g)
	if !unused.closed.Load() || used.closed.Load() || third.closed.Load() {
		t.Fatalf("closed: never used %v, used %v, new %v; want only the never used one", unused.closed.Load(), used.closed.Load(), third.closed.Load())
	}
	if n := m.Sum(t, "cycles.conn.limit_closures", attribute.String("reason", "idle_evicted")); n != 1 {
		t.Fatalf("idle_evicted = %d, want 1", n)
	}
	// A connection with an RPC in flight is never evicted.
	used.streamStarted()
	third.streamStarted()
	dial(t, g)
	accepted := acceptLater(g)
	select {
	case <-accepted:
		t.Fatal("a connection was accepted past the limit while every other one had an RPC in flight")
	case <-time.After(300 * time.Millisecond):
	}
	third.streamEnded()
	_ = third.Close()
	if sc := <-accepted; sc == nil {
		t.Fatal("no connection accepted after one closed")
	} else {
		_ = sc.Close()
	}
}

func TestConnGuardClosesAConnectionOfRefusals(t *testing.T) {
	g, m := newTestGuard(t, Limits{RefusedStreamsPerConn: 8, FloodClosuresPerPeer: -1})
	now := time.Now()
	g.now = func() time.Time { return now }
	closures := 0
	for _, tc := range []struct {
		name            string
		served, refused int
		every           time.Duration // between two refusals
		closed          bool
	}{
		{"refusals under the limit", 0, 7, 0, false},
		{"refusals at the limit", 0, 8, 0, true},
		{"at the limit in a second", 0, 8, 100 * time.Millisecond, true},
		{"more served than refused", 20, 8, 0, false},
		{"refusals spread over more than a second", 0, 12, 200 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dialAccept(t, g)
			for range tc.served {
				c.streamStarted()
				c.streamEnded()
			}
			for range tc.refused {
				c.streamRefused()
				now = now.Add(tc.every)
			}
			if c.condemned() != tc.closed {
				t.Fatalf("condemned = %v, want %v", c.condemned(), tc.closed)
			}
			if tc.closed {
				closures++
				// Not read from again, and closed after the grace.
				if n, err := c.Read(make([]byte, 16)); n != 0 || !errors.Is(err, net.ErrClosed) {
					t.Fatalf("read from a condemned connection: %d, %v", n, err)
				}
				if !c.closed.Load() {
					t.Fatal("a condemned connection was not closed")
				}
			}
		})
	}
	if n := m.Sum(t, "cycles.conn.limit_closures", attribute.String("reason", "refused_streams")); n != int64(closures) {
		t.Fatalf("refused_streams = %d, want %d", n, closures)
	}
}

// A peer whose connections were closed for refused streams twice has its
// next connections closed at accept, until the cool-down has passed; with
// per-peer tracking off, never.
func TestConnGuardClosesAFloodingPeerAtAccept(t *testing.T) {
	for _, tc := range []struct {
		name    string
		perPeer int
		banned  bool
	}{
		{"tracked", 2, true},
		{"off", -1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, m := newTestGuard(t, Limits{RefusedStreamsPerConn: 4, FloodClosuresPerPeer: tc.perPeer, FloodPeerCooldown: 10 * time.Second})
			// Accept reads the clock on its own goroutine.
			var clock atomic.Int64
			clock.Store(time.Now().UnixNano())
			g.now = func() time.Time { return time.Unix(0, clock.Load()) }
			for range 2 {
				c := dialAccept(t, g)
				for range 4 {
					c.streamRefused()
				}
				if !c.condemned() {
					t.Fatal("flooding connection not condemned")
				}
				clock.Add(int64(5 * time.Second))
			}
			// The next connection arrives while the peer is cooling down; the
			// one after it once the cool-down has passed.
			early := dial(t, g)
			accepted := acceptLater(g)
			if tc.banned {
				// The early connection is closed by the guard; Accept goes on
				// waiting.
				_ = early.SetReadDeadline(time.Now().Add(5 * time.Second))
				if _, err := early.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatalf("a connection from a peer in its cool-down was not closed at accept: %v", err)
				}
				clock.Add(int64(11 * time.Second))
				dial(t, g)
			}
			sc := <-accepted
			if sc == nil {
				t.Fatal("nothing accepted")
			}
			_ = sc.Close()
			want := int64(0)
			if tc.banned {
				want = 1
			}
			if n := m.Sum(t, "cycles.conn.limit_closures", attribute.String("reason", "flood_peer")); n != want {
				t.Fatalf("flood_peer = %d, want %d", n, want)
			}
		})
	}
}

// A connection without more streams served than refused (a new one too) is
// read a little at a time, so that grpc-go has little buffered to parse once
// the guard condemns it; one that has been served is read in full.
func TestConnGuardReadsASuspectConnectionSlowly(t *testing.T) {
	g, _ := newTestGuard(t, Limits{})
	for _, tc := range []struct {
		name            string
		served, refused int
		max             int
	}{
		{"served", 1, 0, 8 << 10},
		{"new", 0, 0, suspectReadBytes},
		{"refused as much as served", 1, 1, suspectReadBytes},
		{"mostly refused", 0, 1, suspectReadBytes},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, g)
			gc := accept(t, g)
			for range tc.served {
				gc.streamStarted()
			}
			for range tc.refused {
				gc.streamRefused()
			}
			if _, err := c.Write(make([]byte, 8<<10)); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 32<<10)
			got := 0
			for got < 8<<10 {
				n, err := gc.Read(buf)
				if err != nil {
					t.Fatal(err)
				}
				if n > tc.max {
					t.Fatalf("one read took %d bytes, want at most %d", n, tc.max)
				}
				got += n
			}
			if got != 8<<10 {
				t.Fatalf("read %d bytes", got)
			}
		})
	}
}

// The tap refuses a stream parsed from a condemned connection with the
// prebuilt answer, counted as a refusal but not against the connection.
func TestTapOnACondemnedConnection(t *testing.T) {
	g, _ := newTestGuard(t, Limits{})
	gc := dialAccept(t, g)
	gc.condemn("refused_streams")
	m := telemetrytest.New()
	gate := &streamGate{authn: &authenticator{peers: newPeerGuard(PreAuthLimits{}, time.Now),
		preauthRefusals: telemetry.MustCounter(telemetry.Meter(m.Provider, "test"), "cycles.rpc.preauth_refusals", "test")}}
	ctx := context.WithValue(context.Background(), connKey{}, gc)
	refused := gc.refused.Load()
	if _, err := gate.tap(ctx, &tap.Info{FullMethodName: "/cycles.v1.RuntimeService/CreateReservation"}); !errors.Is(err, condemnedErr) {
		t.Fatalf("tap on a condemned connection: %v, want the prebuilt refusal", err)
	}
	if n := m.Sum(t, "cycles.rpc.preauth_refusals", attribute.String("reason", "condemned_conn")); n != 1 || gc.refused.Load() != refused {
		t.Fatalf("counted %d condemned_conn refusals, the connection's refused %d -> %d; want 1 and unchanged", n, refused, gc.refused.Load())
	}
}

func TestPublicGuard(t *testing.T) {
	lim := Limits{PublicAwaitingPerConn: 2, PublicAwaitingTotal: 3, PublicStreamsPerConn: 3}.withDefaults()
	m := telemetrytest.New()
	g := newPublicGuard(lim, telemetry.Meter(m.Provider, "test"))
	a, b := &guardedConn{}, &guardedConn{}
	admit := func(gc *guardedConn) (context.Context, context.CancelFunc, string) {
		ctx, cancel := context.WithCancel(context.Background())
		sctx, limit, err := g.admit(ctx, gc, healthCheckMethod)
		if limit != "" {
			cancel()
			if ae, ok := apierr.As(err); !ok || ae.Code != apierr.LimitExceeded || ae.Details["limit"] != limit {
				t.Fatalf("refusal %v has no LIMIT_EXCEEDED naming %s", err, limit)
			}
		}
		return sctx, cancel, limit
	}
	a1, _, _ := admit(a)
	a2, cancelA2, _ := admit(a)
	if _, _, limit := admit(a); limit != "public_awaiting_per_conn" {
		t.Fatalf("third waiting stream on one connection: limit %q", limit)
	}
	b1, _, _ := admit(b)
	// The fourth waiting stream in all takes the slot of the oldest.
	b2, _, limit := admit(b)
	if limit != "" || !errors.Is(context.Cause(a1), errPublicEvicted) || b1.Err() != nil || b2.Err() != nil {
		t.Fatalf("at the total: limit %q, oldest %v, others %v %v", limit, context.Cause(a1), b1.Err(), b2.Err())
	}
	// A stream whose message arrived no longer waits, but stays open.
	publicStreamOf(a2).received()
	if n := a.awaiting.Load(); n != 0 {
		t.Fatalf("waiting on a after its message and the eviction = %d", n)
	}
	// The evicted stream's slot is released with its context.
	waitFor(t, func() bool { return a.public.Load() == 1 })
	a3, _, _ := admit(a)
	a4, _, _ := admit(a)
	if _, _, limit := admit(a); limit != "public_streams_per_conn" || a3.Err() != nil || a4.Err() != nil {
		t.Fatalf("fourth open stream on a connection (3 allowed): limit %q", limit)
	}
	cancelA2()
	waitFor(t, func() bool { return a.public.Load() == 2 })
	if n := m.Sum(t, "cycles.rpc.public_recv_timeouts", attribute.String("cause", "evicted")); n != 2 { // a1, then b1 for a4
		t.Fatalf("evictions counted = %d, want 2", n)
	}
}

const healthCheckMethod = "/grpc.health.v1.Health/Check"

// waitFor polls cond (context.AfterFunc runs in its own goroutine).
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition never held")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRefusalBeforeTheBodyDoesNotDrainIt: a route that answers 401 without
// reading a trickled body answers at once and closes the connection.
func TestRefusalBeforeTheBodyDoesNotDrainIt(t *testing.T) {
	m := telemetrytest.New()
	closures := telemetry.MustCounter(telemetry.Meter(m.Provider, "test"), "cycles.conn.limit_closures", "test")
	srv := httptest.NewServer(BodyDeadline(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
	}), time.Minute, 1, closures))
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{")); err != nil {
		t.Fatal(err)
	}
	// Bounded wait: without the fix net/http would drain the body first and
	// never answer (the rest never comes).
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to a refused request with an unread body: %v", err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized || !res.Close {
		t.Fatalf("got %s, close %v; want 401 and the connection closed", res.Status, res.Close)
	}
	if n := m.Sum(t, "cycles.conn.limit_closures", attribute.String("reason", "http_unread_body")); n != 1 {
		t.Fatalf("http_unread_body = %d, want 1", n)
	}
}
