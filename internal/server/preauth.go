package server

import (
	"context"
	"math"
	"net"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/tap"

	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/defaults"
	"github.com/cyclesgo/cycles-go/internal/reqctx"
)

// Pre-auth (docs/limits.md): grpc-go reads and decodes a request's whole
// body before the first interceptor runs, so authenticating only in the
// interceptor let a caller without credentials make cyclesd hold every body
// it sent. The tap (grpc.InTapHandle) sees the method and the metadata when
// the HEADERS frame arrives, before any DATA, and refuses there:
//
//   - missing credentials, a wrong admin key, an admin-only method without the
//     admin key, a malformed API key, a key refused moments ago (the
//     verifier's negative cache);
//   - any caller from a peer over its failed-authentication budget, unless its
//     API key is already known good (cached);
//   - a well-formed but unverified key from a peer that already has
//     UnverifiedKeysPerPeer other unverified keys in flight (a guessing loop
//     varies the key; a client's burst on a cold cache repeats one), or
//     that has failed recently and has UnverifiedPerFailingPeer requests
//     with unverified keys in flight.
//
// grpc runs the tap on the connection's reader goroutine under the
// transport's lock, so it does no I/O: a well-formed key that only Redis can
// judge passes on, and the auth interceptor verifies it (one script call)
// after the body is read. That is the one place a Redis-backed verification
// happens; a principal the tap resolved (admin key, cached API key) flows to
// the interceptor in the stream's context and is not checked twice. A peer
// with a clean record is never limited here; its bodies are bounded by
// -max-recv-msg-bytes, -max-concurrent-streams and -max-connections.

// PreAuthLimits bound what callers that fail authentication can cost.
type PreAuthLimits struct {
	// AuthFailBurst is how many failed authentications a peer (an IPv4
	// address or an IPv6 /64) may make before it is throttled; 0: 20;
	// negative: no per-peer tracking at all (behind an L7 proxy every caller
	// shares the proxy's address; throttle at the proxy instead).
	AuthFailBurst int `defaults:"keep-negative"`
	// AuthFailRate is how many failures per second are forgiven; 0: 2.
	AuthFailRate float64
	// UnverifiedPerFailingPeer bounds a recently failing peer's requests with
	// a not-yet-verified key in flight; 0: 4.
	UnverifiedPerFailingPeer int
	// UnverifiedKeysPerPeer bounds the distinct not-yet-verified keys a peer
	// has in flight (however many requests use each); 0: 8.
	UnverifiedKeysPerPeer int
	// MaxPeers bounds the peers tracked; 0: 65,536.
	MaxPeers int
}

// DefaultPreAuthLimits are the pre-authentication bounds of a public listener.
func DefaultPreAuthLimits() PreAuthLimits {
	return PreAuthLimits{AuthFailBurst: 20, AuthFailRate: 2, UnverifiedPerFailingPeer: 4, UnverifiedKeysPerPeer: 8, MaxPeers: 1 << 16}
}

func (l PreAuthLimits) withDefaults() PreAuthLimits {
	defaults.Fill(&l, DefaultPreAuthLimits())
	return l
}

// verdict is what the in-memory phase of authentication decided.
type verdict int

const (
	verdictPublic     verdict = iota + 1 // no credentials needed (health, reflection)
	verdictResolved                      // principal known without I/O
	verdictNeedsStore                    // a well-formed API key only the store can judge
)

// local authenticates without I/O. For verdictNeedsStore it returns the
// presented API key.
func (a *authenticator) local(ctx context.Context, fullMethod string) (verdict, auth.Principal, string, error) {
	r := accessOf(fullMethod)
	who := r.who
	if who == accessNone {
		return verdictPublic, auth.Principal{}, "", nil
	}
	// A tenant method the admin may call on a tenant's behalf takes the
	// admin key only when no API key is sent (the API key then decides).
	onBehalf := r.onBehalfOf != "" && auth.FirstMetadata(ctx, auth.APIKeyHeader) == ""
	if adminKey := auth.FirstMetadata(ctx, auth.AdminKeyHeader); adminKey != "" && (who == accessAdmin || who == accessEither || onBehalf) {
		if !auth.EqualAdminKey(adminKey, a.adminKey) {
			return 0, auth.Principal{}, "", apierr.New(apierr.Unauthorized, "invalid admin key")
		}
		return verdictResolved, auth.Principal{Admin: true}, "", nil
	}
	if who == accessAdmin {
		return 0, auth.Principal{}, "", apierr.New(apierr.Unauthorized, "this method needs the admin key in metadata %s", auth.AdminKeyHeader)
	}
	apiKey := auth.FirstMetadata(ctx, auth.APIKeyHeader)
	if apiKey == "" {
		return 0, auth.Principal{}, "", apierr.New(apierr.Unauthorized, "missing API key in metadata %s", auth.APIKeyHeader)
	}
	if a.verifier == nil {
		return 0, auth.Principal{}, "", apierr.New(apierr.Unauthorized, "API keys are not configured")
	}
	if lv, ok := a.verifier.(auth.LocalVerifier); ok {
		p, known, err := lv.VerifyAPIKeyLocally(ctx, apiKey)
		switch {
		case known && err != nil:
			return 0, auth.Principal{}, "", err
		case known:
			return verdictResolved, p, "", nil
		}
	}
	return verdictNeedsStore, auth.Principal{}, apiKey, nil
}

// tap is the grpc.InTapHandle: see the comment at the top of this file.
func (a *authenticator) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	if accessOf(info.FullMethodName).who == accessNone {
		return ctx, nil
	}
	pk := peerKey(ctx)
	if wait, throttled := a.peers.throttled(pk); throttled {
		// Only a key already known good passes; nothing is verified or
		// counted for a throttled peer.
		if v, p, _, err := a.local(ctx, info.FullMethodName); err == nil && v == verdictResolved && !p.Admin {
			return auth.WithPrincipal(ctx, p), nil
		}
		return ctx, a.refuse(ctx, "auth_throttled", &apierr.Error{
			Code:       apierr.LimitExceeded,
			Message:    "too many failed authentications from this address; retry later",
			Details:    map[string]string{"limit": "auth_failures_per_peer"},
			RetryAfter: wait,
		})
	}
	v, p, apiKey, err := a.local(ctx, info.FullMethodName)
	switch {
	case err != nil:
		a.peers.fail(pk)
		a.authRefused(ctx, pk, err)
		return ctx, a.refuse(ctx, "unauthenticated", err)
	case v == verdictResolved:
		return auth.WithPrincipal(ctx, p), nil
	case v == verdictNeedsStore:
		release, limit := a.peers.admitUnverified(pk, apiKey)
		if limit != "" {
			return ctx, a.refuse(ctx, "unverified_in_flight", &apierr.Error{
				Code:       apierr.LimitExceeded,
				Message:    "too many requests with not-yet-verified API keys in flight from this address; retry shortly",
				Details:    map[string]string{"limit": limit},
				RetryAfter: time.Second,
			})
		}
		// The stream's context ends with the stream, whatever happens to it.
		context.AfterFunc(ctx, release)
	}
	return ctx, nil
}

// PreAuth gives a call arriving on the HTTP listener the tap's checks before
// its body is read: transports that decode the body themselves (the Cycles
// HTTP wire) call it first, so a caller without valid credentials costs no
// body read and no Redis call, and failed authentications over HTTP count
// against the same per-peer budget as over gRPC. fullMethod is the method
// whose access rule applies; md carries the credentials as gRPC metadata;
// remoteAddr is http.Request.RemoteAddr.
//
// It returns ctx with the caller's peer (so the chain's own authentication
// counts failures against it) but never with the principal the tap may have
// resolved: the chain authenticates the call again under its real method.
// A refusal is a gRPC status error with ErrorInfo, as the tap's.
func (s *Server) PreAuth(ctx context.Context, fullMethod string, md metadata.MD, remoteAddr string) (context.Context, error) {
	if ta, err := net.ResolveTCPAddr("tcp", remoteAddr); err == nil {
		ctx = peer.NewContext(ctx, &peer.Peer{Addr: ta})
	}
	if s.authn == nil {
		return ctx, nil
	}
	_, err := s.authn.tap(metadata.NewIncomingContext(ctx, md), &tap.Info{FullMethodName: fullMethod})
	return ctx, err
}

// refuse counts a tap refusal and returns it as a gRPC status error (the tap
// must return one, or grpc answers PERMISSION_DENIED).
func (a *authenticator) refuse(ctx context.Context, reason string, err error) error {
	if a.preauthRefusals != nil {
		a.preauthRefusals.Add(context.WithoutCancel(ctx), 1, metric.WithAttributes(attribute.String("reason", reason)))
	}
	// The same ErrorInfo shape as any other refusal: the caller's request id
	// (or a fresh one) and a trace id (no span exists yet).
	reqID := reqctx.RequestIDOrNew(auth.FirstMetadata(ctx, auth.RequestIDHeader))
	traceID := reqctx.NewTraceID()
	if ae, ok := apierr.As(err); ok {
		return ae.Status(reqID, traceID).Err()
	}
	return (&apierr.Error{Code: apierr.Unauthorized, Message: "unauthenticated"}).Status(reqID, traceID).Err()
}

// peerKey is the throttling identity of the caller: its IPv4 address, or the
// /64 of an IPv6 one (one host usually owns a whole /64).
func peerKey(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return ""
	}
	return peerKeyOf(p.Addr)
}

// peerKeyOf is peerKey of a remote address.
func peerKeyOf(addr net.Addr) string {
	if ta, ok := addr.(*net.TCPAddr); ok {
		if ip4 := ta.IP.To4(); ip4 != nil {
			return ip4.String()
		}
		return ta.IP.Mask(net.CIDRMask(64, 128)).String() + "/64"
	}
	return addr.String()
}

// peerGuard tracks failed authentications and unverified requests per peer.
// A failure adds one to the peer's score, which drains at rate per second;
// at burst the peer is throttled.
type peerGuard struct {
	lim PreAuthLimits
	now func() time.Time

	mu    sync.Mutex
	peers map[string]*peerState
}

type peerState struct {
	score      float64
	last       time.Time
	unverified int            // requests with a not-yet-verified key in flight
	keys       map[string]int // those requests by key
}

func newPeerGuard(lim PreAuthLimits, now func() time.Time) *peerGuard {
	return &peerGuard{lim: lim.withDefaults(), now: now, peers: make(map[string]*peerState)}
}

// state returns the decayed state of key; create adds a missing one (nil
// when the table is full even after pruning). Called with mu held.
func (g *peerGuard) state(key string, create bool) *peerState {
	now := g.now()
	st, ok := g.peers[key]
	if !ok {
		if !create {
			return nil
		}
		if len(g.peers) >= g.lim.MaxPeers {
			g.prune(now)
			if len(g.peers) >= g.lim.MaxPeers {
				return nil
			}
		}
		st = &peerState{last: now}
		g.peers[key] = st
		return st
	}
	if el := now.Sub(st.last).Seconds(); el > 0 {
		st.score = math.Max(0, st.score-el*g.lim.AuthFailRate)
		st.last = now
	}
	return st
}

// prune drops peers with nothing to remember.
func (g *peerGuard) prune(now time.Time) {
	for k, st := range g.peers {
		if st.unverified == 0 && st.score-now.Sub(st.last).Seconds()*g.lim.AuthFailRate <= 0 {
			delete(g.peers, k)
		}
	}
}

// off reports whether per-peer tracking is disabled.
func (g *peerGuard) off() bool { return g.lim.AuthFailBurst < 0 }

func (g *peerGuard) fail(key string) {
	if g.off() {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if st := g.state(key, true); st != nil {
		st.score++
	}
}

// throttled reports whether key is over its failure budget and, if so, how
// long until it is under it again.
func (g *peerGuard) throttled(key string) (time.Duration, bool) {
	if g.off() {
		return 0, false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.state(key, false)
	// Throttled while one more failure would exceed the burst.
	if st == nil {
		return 0, false
	}
	over := st.score + 1 - float64(g.lim.AuthFailBurst)
	if over <= 0 {
		return 0, false
	}
	return time.Duration(over / g.lim.AuthFailRate * float64(time.Second)), true
}

// admitUnverified lets one request with the not-yet-verified key through,
// or names the limit that refuses it: a peer may have UnverifiedKeysPerPeer
// distinct such keys in flight, and once it has failed recently
// UnverifiedPerFailingPeer such requests in all.
func (g *peerGuard) admitUnverified(peerKey, apiKey string) (release func(), limit string) {
	if g.off() {
		return func() {}, ""
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.state(peerKey, true)
	if st == nil {
		// Table full of failing peers: admit, other limits still bound it.
		return func() {}, ""
	}
	if st.score > 0 && st.unverified >= g.lim.UnverifiedPerFailingPeer {
		return nil, "unverified_per_failing_peer"
	}
	if st.keys[apiKey] == 0 && len(st.keys) >= g.lim.UnverifiedKeysPerPeer {
		return nil, "unverified_keys_per_peer"
	}
	if st.keys == nil {
		st.keys = make(map[string]int)
	}
	st.unverified++
	st.keys[apiKey]++
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			st.unverified--
			if st.keys[apiKey]--; st.keys[apiKey] <= 0 {
				delete(st.keys, apiKey)
			}
			if st.unverified == 0 && st.score == 0 {
				delete(g.peers, peerKey)
			}
		})
	}, ""
}
