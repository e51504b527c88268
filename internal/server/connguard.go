package server

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc/stats"

	"github.com/cyclesgo/cycles-go/internal/apierr"
)

// Connection guard (docs/limits.md, "Connections"). grpc-go bounds streams,
// headers and messages, but not what a connection costs while its peer
// misbehaves at the TCP level, so the gRPC listener is wrapped:
//
//   - at most MaxConnections are open; when a new connection arrives at the
//     limit, the oldest connection without an RPC in flight that has been
//     quiet for a moment is closed to make room (reason idle_evicted), so
//     idle or preface-only connections cannot lock other clients out;
//   - a connection that starts no RPC within FirstStreamTimeout of being
//     accepted is closed (reason no_stream): a preface-only connection;
//   - a connection whose peer does not read: while a write of ours has been
//     blocked for a moment, reading from that connection pauses, so the
//     server stops taking requests (and queueing answers) from a client that
//     never reads them; a write blocked for WriteStallTimeout closes the
//     connection (reason write_stall);
//   - a connection that has had RefusedStreamsPerConn streams refused before
//     their body (pre-auth tap, public-stream limits) within one second, and
//     more refused than served in all, is condemned (reason
//     refused_streams): a HEADERS flood. It is not read from again, and its
//     socket is closed under grpc-go condemnGrace later (a graceful GOAWAY
//     would keep reading), so the answers already written reach an honest
//     client that is merely using a wrong key. The frames grpc-go had
//     already buffered are refused by the tap with a prebuilt answer
//     (condemnedErr), and a connection without more served than refused
//     streams is read 1 KiB at a time (suspectReadBytes), so that buffer is
//     small;
//   - a peer (IPv4 address or IPv6 /64) whose connections were closed for
//     refused streams FloodClosuresPerPeer times, each within
//     FloodPeerCooldown of the previous, has its new connections closed at
//     accept, before grpc-go spends anything on them, until it has been
//     FloodPeerCooldown without such a closure (reason flood_peer). The peers
//     remembered are bounded (floodPeers).
//
// Every closure adds one to cycles.conn.limit_closures{reason}.

// connGuard is the listener wrapper and the registry of its connections.
type connGuard struct {
	net.Listener
	lim      Limits
	now      func() time.Time
	closures metric.Int64Counter
	slots    chan struct{}

	mu    sync.Mutex
	conns map[*guardedConn]struct{}
	done  chan struct{}
	once  sync.Once

	flood *floodPeers
}

func newConnGuard(lis net.Listener, lim Limits, closures metric.Int64Counter) *connGuard {
	return &connGuard{
		Listener: lis, lim: lim, now: time.Now, closures: closures,
		slots: make(chan struct{}, lim.MaxConnections),
		conns: make(map[*guardedConn]struct{}),
		done:  make(chan struct{}),
		flood: newFloodPeers(lim.FloodClosuresPerPeer, lim.FloodPeerCooldown, lim.PreAuth.MaxPeers),
	}
}

// Accept returns the next connection once there is room for it: at the
// limit it evicts an idle connection, or waits until one closes. A
// connection from a peer in its flood cool-down is closed here and never
// reaches grpc-go.
func (g *connGuard) Accept() (net.Conn, error) {
	var c net.Conn
	for {
		var err error
		if c, err = g.Listener.Accept(); err != nil {
			return nil, err
		}
		if !g.flood.banned(peerKeyOf(c.RemoteAddr()), g.now()) {
			break
		}
		g.count("flood_peer")
		_ = c.Close()
	}
	for {
		select {
		case g.slots <- struct{}{}:
			return g.track(c), nil
		default:
		}
		g.evictIdle()
		select {
		case g.slots <- struct{}{}:
			return g.track(c), nil
		case <-time.After(100 * time.Millisecond):
		case <-g.done:
			_ = c.Close()
			return nil, net.ErrClosed
		}
	}
}

// Close stops accepting.
func (g *connGuard) Close() error {
	g.once.Do(func() { close(g.done) })
	return g.Listener.Close()
}

func (g *connGuard) track(c net.Conn) *guardedConn {
	gc := &guardedConn{Conn: c, g: g, accepted: g.now(), gone: make(chan struct{})}
	gc.lastUse.Store(gc.accepted.UnixNano())
	g.mu.Lock()
	g.conns[gc] = struct{}{}
	g.mu.Unlock()
	gc.firstStream = time.AfterFunc(g.lim.FirstStreamTimeout, func() {
		if gc.streams.Load() == 0 {
			gc.closeFor("no_stream")
		}
	})
	return gc
}

// evictIdle closes the connection without an RPC in flight that has been
// quiet longest (at least a second: a client between two calls keeps its
// connection), preferring ones that never carried an RPC.
func (g *connGuard) evictIdle() {
	now := g.now().UnixNano()
	var victim *guardedConn
	var best int64
	g.mu.Lock()
	for gc := range g.conns {
		if gc.active.Load() > 0 {
			continue
		}
		quiet := now - gc.lastUse.Load()
		if quiet < int64(time.Second) {
			continue
		}
		if gc.streams.Load() == 0 {
			quiet += int64(time.Hour) // never used: first to go
		}
		if victim == nil || quiet > best {
			victim, best = gc, quiet
		}
	}
	g.mu.Unlock()
	if victim != nil {
		victim.closeFor("idle_evicted")
	}
}

func (g *connGuard) count(reason string) {
	g.closures.Add(context.Background(), 1, metric.WithAttributes(attribute.String("reason", reason)))
}

// guardedConn is one accepted connection.
type guardedConn struct {
	net.Conn
	g           *connGuard
	accepted    time.Time
	firstStream *time.Timer

	active   atomic.Int32 // RPCs in flight
	streams  atomic.Int64 // RPCs started
	refused  atomic.Int64 // streams refused before their body
	lastUse  atomic.Int64 // unix ns of the last RPC start or end
	public   atomic.Int32 // public (unauthenticated) streams open
	awaiting atomic.Int32 // public streams still waiting for their request message

	// windowN counts the refusals since windowStart (the tap runs on the
	// connection's one reader goroutine; the lock keeps that an assumption
	// nothing depends on).
	rmu         sync.Mutex
	windowStart time.Time
	windowN     int

	// writeStart is the unix ns at which the write in progress began (0:
	// none); wmu is held by that write.
	writeStart atomic.Int64
	wmu        sync.Mutex

	closeOnce sync.Once
	closed    atomic.Bool
	// condemnedFlag: no more reads; the socket closes condemnGrace later.
	// gone is closed with the socket.
	condemnedFlag atomic.Bool
	gone          chan struct{}
}

// stallPause is how long a write may be blocked before reads pause.
const stallPause = 20 * time.Millisecond

// suspectReadBytes is the most one read takes from a connection that has not
// had more streams served than refused (a new one included: a flood writes
// thousands of HEADERS before the first read). grpc-go reads into a 32 KiB
// buffer and parses every frame in it even after the guard has condemned
// the connection; a flood's HEADERS frames are ~15 bytes once
// HPACK-indexed, so a full buffer is ~2,000 more streams to refuse. 1 KiB is
// ~70. An honest client's first read (preface, settings, its first HEADERS)
// fits, and once its first stream is admitted it is read in full.
const suspectReadBytes = 1 << 10

func (c *guardedConn) Read(p []byte) (int, error) {
	if ws := c.writeStart.Load(); ws != 0 && time.Now().UnixNano()-ws > int64(stallPause) {
		// Our peer is not reading what we write: wait for that write to
		// finish (or time out and close the connection) before taking more
		// requests from it.
		c.wmu.Lock()
		c.wmu.Unlock() //nolint:staticcheck // waiting for the writer, nothing to guard
	}
	if c.condemnedFlag.Load() {
		// Nothing more is taken from a condemned connection: grpc-go's
		// reader waits here until the socket closes.
		<-c.gone
		return 0, net.ErrClosed
	}
	if len(p) > suspectReadBytes && c.refused.Load() >= c.streams.Load() {
		p = p[:suspectReadBytes]
	}
	return c.Conn.Read(p)
}

func (c *guardedConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.writeStart.Store(time.Now().UnixNano())
	defer c.writeStart.Store(0)
	_ = c.Conn.SetWriteDeadline(time.Now().Add(c.g.lim.WriteStallTimeout))
	n, err := c.Conn.Write(p)
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		c.closeFor("write_stall")
	}
	return n, err
}

func (c *guardedConn) Close() error {
	err := c.Conn.Close()
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		if c.gone != nil {
			close(c.gone)
		}
		c.firstStream.Stop()
		c.g.mu.Lock()
		delete(c.g.conns, c)
		c.g.mu.Unlock()
		<-c.g.slots
	})
	return err
}

// closeFor closes the connection because of a limit and counts it.
func (c *guardedConn) closeFor(reason string) {
	if c.closed.Load() {
		return
	}
	c.g.count(reason)
	_ = c.Close()
}

// streamStarted and streamEnded track RPCs in flight (the tap admits,
// the stream context's end releases).
func (c *guardedConn) streamStarted() {
	c.streams.Add(1)
	c.active.Add(1)
	c.lastUse.Store(time.Now().UnixNano())
}

func (c *guardedConn) streamEnded() {
	c.active.Add(-1)
	c.lastUse.Store(time.Now().UnixNano())
}

// refusalWindow is the span in which RefusedStreamsPerConn refusals close a
// connection: a flood sends thousands per second, an honest client with a
// bad key a few.
const refusalWindow = time.Second

// streamRefused counts a refusal before the body and closes a connection
// that mostly carries refused streams, and refused many just now.
func (c *guardedConn) streamRefused() {
	n := c.refused.Add(1)
	now := c.g.now()
	c.rmu.Lock()
	if now.Sub(c.windowStart) > refusalWindow {
		c.windowStart, c.windowN = now, 0
	}
	c.windowN++
	burst := c.windowN >= c.g.lim.RefusedStreamsPerConn
	c.rmu.Unlock()
	if burst && n > c.streams.Load() && !c.condemned() {
		c.g.flood.closed(peerKeyOf(c.Conn.RemoteAddr()), now)
		c.condemn("refused_streams")
	}
}

// condemnGrace is how long a condemned connection stays open, unread, so
// that the answers already queued for it can still be written.
const condemnGrace = 200 * time.Millisecond

// condemn stops reading from the connection now, closes it condemnGrace
// later, and counts the closure.
func (c *guardedConn) condemn(reason string) {
	if c.closed.Load() || c.condemnedFlag.Swap(true) {
		return
	}
	c.g.count(reason)
	time.AfterFunc(condemnGrace, func() { _ = c.Close() })
}

// condemned reports whether the guard has condemned or closed the
// connection: grpc-go may still be parsing frames it had buffered, and those
// deserve no work.
func (c *guardedConn) condemned() bool { return c.condemnedFlag.Load() || c.closed.Load() }

// condemnedErr is the tap's answer to a stream parsed from a condemned
// connection: built once (grpc-go only marshals it), counted in
// cycles.rpc.preauth_refusals{reason="condemned_conn"} (condemnedRefusal)
// but not against the connection or its peer.
var condemnedErr = (&apierr.Error{
	Code:    apierr.LimitExceeded,
	Message: "too many streams refused on this connection; it is being closed",
	Details: map[string]string{"limit": "refused_streams_per_conn"},
}).Status("", "").Err()

var condemnedRefusal = metric.WithAttributes(attribute.String("reason", "condemned_conn"))

// ---- peers that flood ------------------------------------------------------

// floodPeers remembers, per peer, its recent refused_streams closures. A
// peer is banned while it has had `after` of them, each within cooldown of
// the previous, and the last less than cooldown ago. Entries whose last
// closure is older than cooldown are forgotten; at max entries the stale ones
// are pruned, and when none is stale a new peer is not tracked (the
// per-connection limit still bounds it).
type floodPeers struct {
	after    int
	cooldown time.Duration
	max      int

	mu    sync.Mutex
	peers map[string]*floodPeer
}

type floodPeer struct {
	n    int       // closures in the current run
	last time.Time // the latest
}

func newFloodPeers(after int, cooldown time.Duration, max int) *floodPeers {
	return &floodPeers{after: after, cooldown: cooldown, max: max, peers: make(map[string]*floodPeer)}
}

// off: no per-peer tracking (-flood-closures-per-peer 0, e.g. behind an L7
// proxy, where every client shares the proxy's address).
func (f *floodPeers) off() bool { return f == nil || f.after <= 0 }

// closed records a refused_streams closure of one of key's connections.
func (f *floodPeers) closed(key string, now time.Time) {
	if f.off() {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.peers[key]
	if !ok {
		if len(f.peers) >= f.max {
			for k, q := range f.peers {
				if now.Sub(q.last) > f.cooldown {
					delete(f.peers, k)
				}
			}
			if len(f.peers) >= f.max {
				return
			}
		}
		p = &floodPeer{}
		f.peers[key] = p
	}
	if now.Sub(p.last) > f.cooldown {
		p.n = 0
	}
	p.n++
	p.last = now
}

// banned reports whether a new connection from key is to be closed at once.
func (f *floodPeers) banned(key string, now time.Time) bool {
	if f.off() {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.peers[key]
	if !ok {
		return false
	}
	if now.Sub(p.last) > f.cooldown {
		delete(f.peers, key)
		return false
	}
	return p.n >= f.after
}

// ---- finding the connection of a stream ------------------------------------

type connKey struct{}

// connOf is the guarded connection a stream arrived on (nil when the server
// was not started through Serve, e.g. in unit tests with bufconn).
func connOf(ctx context.Context) *guardedConn {
	gc, _ := ctx.Value(connKey{}).(*guardedConn)
	return gc
}

// connStats is the stats handler that ties a transport's context to its
// guarded connection, and tells the public-stream guard when a request
// message has arrived.
type connStats struct{ g atomic.Pointer[connGuard] }

func (h *connStats) TagConn(ctx context.Context, info *stats.ConnTagInfo) context.Context {
	g := h.g.Load()
	if g == nil {
		return ctx
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for gc := range g.conns {
		if gc.Conn.RemoteAddr().String() == info.RemoteAddr.String() && gc.Conn.LocalAddr().String() == info.LocalAddr.String() {
			return context.WithValue(ctx, connKey{}, gc)
		}
	}
	return ctx
}

func (h *connStats) HandleConn(context.Context, stats.ConnStats) {}

func (h *connStats) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

func (h *connStats) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if _, ok := s.(*stats.InPayload); ok {
		if ps := publicStreamOf(ctx); ps != nil {
			ps.received()
		}
	}
}
