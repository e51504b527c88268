// Package server is cyclesd's gRPC shell: one place builds the interceptor
// chain (request id, logging, status mapping, recovery, deadline, auth,
// rate-limit guard, validation), registers the services, health and
// reflection, and stops gracefully.
//
// Handlers (internal/api/...) only translate; domain packages decide; internal/script
// talks to Redis.
package server

import (
	"context"
	"net"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/defaults"
	"github.com/cyclesgo/cycles-go/internal/telemetry"
)

// Options configure the shell.
type Options struct {
	Logger         *zap.Logger
	MeterProvider  metric.MeterProvider
	Verifier       auth.Verifier
	AdminKey       string
	RequestTimeout time.Duration
	// Guard is the optional rate-limit interceptor, RateLimitGuard (runs after auth).
	Guard grpc.UnaryServerInterceptor
	// Inner are a service's own unary interceptors, run innermost (after
	// validation and the scope check, just around the handler, where its
	// *apierr.Error is still itself), in order; e.g. adminapi.CountRefusals.
	Inner []grpc.UnaryServerInterceptor
	// ServerOptions are appended (TLS credentials, stats handlers).
	ServerOptions []grpc.ServerOption
	// StreamWorkers is the number of goroutines kept to run RPCs (0:
	// DefaultStreamWorkers, negative: a new goroutine per RPC, gRPC's
	// default). A fresh goroutine per RPC grows its stack through the whole
	// interceptor chain and the Redis client on every call (runtime.newstack
	// was 7% of cyclesd's CPU on the reserve path); a worker keeps its grown
	// stack. When every worker is busy gRPC spawns a goroutine as before, so
	// this never limits concurrency.
	StreamWorkers int
	// Limits bound what any caller can make the server hold (docs/limits.md).
	Limits Limits
	// Audit records audited calls and refused authentications (nil = no
	// audit trail).
	Audit Auditor
}

// Limits are the transport and admission limits of the gRPC listener. Zero
// fields take the defaults of DefaultLimits.
type Limits struct {
	// MaxRecvMsgBytes is the largest request message of any method: grpc
	// reads a message whole before any interceptor runs, so this (global)
	// bound is what caps memory per request.
	MaxRecvMsgBytes int
	// MaxRuntimeRecvBytes is the largest RuntimeService request (checked
	// after decoding; runtime requests are small).
	MaxRuntimeRecvBytes int
	// MaxConcurrentStreams is the HTTP/2 limit of RPCs in flight per connection.
	MaxConcurrentStreams uint32
	// MaxHeaderListBytes bounds the request headers (metadata) of one RPC.
	MaxHeaderListBytes uint32
	// MaxConnections bounds open connections (Serve wraps the listener;
	// beyond it new connections wait in the kernel's accept queue).
	MaxConnections int
	// HandshakeTimeout closes a connection that has not completed its TLS
	// handshake and HTTP/2 preface in time.
	HandshakeTimeout time.Duration
	// MaxConnectionIdle closes a connection with no RPC for this long.
	MaxConnectionIdle time.Duration
	// StreamsPerKey and StreamsTotal bound concurrent server streams
	// (WatchEvents) per API key (or the admin key) and in all.
	StreamsPerKey int
	StreamsTotal  int
	// PreAuth bounds what callers failing authentication can cost.
	PreAuth PreAuthLimits

	// Connection guard (connguard.go). FirstStreamTimeout closes a
	// connection that starts no RPC in time (preface-only); WriteStallTimeout
	// closes one whose peer leaves a write of ours blocked that long;
	// RefusedStreamsPerConn closes one with that many streams refused before
	// their body within a second, when its refused streams outnumber its
	// served ones. A peer that had FloodClosuresPerPeer connections closed
	// that way, each within FloodPeerCooldown of the previous, has its new
	// connections closed at accept until FloodPeerCooldown has passed since
	// the last (negative FloodClosuresPerPeer: no per-peer tracking, for
	// deployments behind an L7 proxy).
	FirstStreamTimeout    time.Duration
	WriteStallTimeout     time.Duration
	RefusedStreamsPerConn int
	FloodClosuresPerPeer  int `defaults:"keep-negative"`
	FloodPeerCooldown     time.Duration

	// Public methods (publicstream.go): health and reflection streams open
	// per connection and in all, those still waiting for their request
	// message per connection and in all, and how long a request message may
	// take to arrive.
	PublicStreamsPerConn  int
	PublicStreamsTotal    int
	PublicAwaitingPerConn int
	PublicAwaitingTotal   int
	PublicRecvTimeout     time.Duration
}

// DefaultLimits are safe limits for a public listener.
func DefaultLimits() Limits {
	return Limits{
		MaxRecvMsgBytes:       1 << 20,
		MaxRuntimeRecvBytes:   64 << 10,
		MaxConcurrentStreams:  256,
		MaxHeaderListBytes:    16 << 10,
		MaxConnections:        1024,
		HandshakeTimeout:      5 * time.Second,
		MaxConnectionIdle:     5 * time.Minute,
		StreamsPerKey:         32,
		StreamsTotal:          2048,
		PreAuth:               DefaultPreAuthLimits(),
		FirstStreamTimeout:    10 * time.Second,
		WriteStallTimeout:     10 * time.Second,
		RefusedStreamsPerConn: 16,
		FloodClosuresPerPeer:  2,
		FloodPeerCooldown:     10 * time.Second,
		PublicStreamsPerConn:  16,
		PublicStreamsTotal:    1024,
		PublicAwaitingPerConn: 4,
		PublicAwaitingTotal:   16,
		PublicRecvTimeout:     5 * time.Second,
	}
}

// withDefaults gives each unset limit its DefaultLimits value (defaults.Fill;
// FloodClosuresPerPeer and PreAuth.AuthFailBurst keep a negative "off").
func (l Limits) withDefaults() Limits {
	defaults.Fill(&l, DefaultLimits())
	return l
}

// DefaultStreamWorkers covers the concurrency one replica usually serves.
const DefaultStreamWorkers = 128

// Services are the implementations to register; nil ones are skipped.
type Services struct {
	Runtime   cyclesv1.RuntimeServiceServer
	Admin     cyclesv1.AdminServiceServer
	Events    cyclesv1.EventServiceServer
	RateLimit cyclesv1.RateLimitServiceServer
	Ops       cyclesv1.OpsServiceServer
	Policy    cyclesv1.PolicyServiceServer
	// QuotaCounters is the operator view of the v0.1.26 quota counters.
	QuotaCounters cyclesv1.QuotaCounterServiceServer
	// Usage answers usage reports from the archive (nil without one).
	Usage cyclesv1.UsageServiceServer
	Audit cyclesv1.AuditServiceServer
	// Operator serves the bulk actions.
	Operator cyclesv1.OperatorServiceServer
	// Overview serves the admin dashboard's snapshot.
	Overview cyclesv1.OverviewServiceServer
	// ActionKinds is the public action-kind registry (no key).
	// Auth answers who the calling credential is.
	Auth        cyclesv1.AuthServiceServer
	ActionKinds cyclesv1.ActionKindServiceServer
	// Register adds anything else (e.g. Envoy's rate limit service).
	Register func(*grpc.Server)
}

// ProvidedService is one service of Services with its gRPC descriptor.
type ProvidedService struct {
	Desc *grpc.ServiceDesc
	Impl any
}

// Provided lists each service svcs provides (a nil one is left out) with its
// descriptor: the gRPC server registers these, and the HTTP/JSON wire calls
// the same ones (internal/api/cycleshttp).
func (svcs Services) Provided() []ProvidedService {
	var out []ProvidedService
	for _, svc := range []ProvidedService{
		{&cyclesv1.RuntimeService_ServiceDesc, svcs.Runtime},
		{&cyclesv1.AdminService_ServiceDesc, svcs.Admin},
		{&cyclesv1.EventService_ServiceDesc, svcs.Events},
		{&cyclesv1.AuthService_ServiceDesc, svcs.Auth},
		{&cyclesv1.RateLimitService_ServiceDesc, svcs.RateLimit},
		{&cyclesv1.OpsService_ServiceDesc, svcs.Ops},
		{&cyclesv1.OperatorService_ServiceDesc, svcs.Operator},
		{&cyclesv1.OverviewService_ServiceDesc, svcs.Overview},
		{&cyclesv1.PolicyService_ServiceDesc, svcs.Policy},
		{&cyclesv1.QuotaCounterService_ServiceDesc, svcs.QuotaCounters},
		{&cyclesv1.UsageService_ServiceDesc, svcs.Usage},
		{&cyclesv1.AuditService_ServiceDesc, svcs.Audit},
		{&cyclesv1.ActionKindService_ServiceDesc, svcs.ActionKinds},
	} {
		if svc.Impl != nil {
			out = append(out, svc)
		}
	}
	return out
}

// Server is the gRPC server with its health service.
type Server struct {
	GRPC    *grpc.Server
	Health  *health.Server
	log     *zap.Logger
	names   []string
	serving atomic.Bool
	// unary is the interceptor chain, kept for Invoke (other transports).
	unary  []grpc.UnaryServerInterceptor
	limits Limits
	// authn is the authenticator the tap and the chain share (PreAuth).
	authn *authenticator
	// conns ties grpc's transports to the guarded listener of Serve.
	conns *connStats
	meter metric.Meter
	// closures counts connections closed by a limit, on either listener.
	closures metric.Int64Counter
}

// New builds the server.
func New(opts Options, svcs Services) *Server {
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	meter := telemetry.Meter(opts.MeterProvider, "server")
	lim := opts.Limits.withDefaults()
	authn := &authenticator{
		verifier: opts.Verifier,
		adminKey: opts.AdminKey,
		peers:    newPeerGuard(lim.PreAuth, time.Now),
		preauthRefusals: telemetry.MustCounter(meter, "cycles.rpc.preauth_refusals",
			"Requests refused before their body was read (attribute reason)"),
		audit: opts.Audit,
	}
	c := &chain{
		log:            log,
		authn:          authn,
		guard:          opts.Guard,
		inner:          opts.Inner,
		requestTimeout: opts.RequestTimeout,
		panics:         telemetry.MustCounter(meter, "cycles.rpc.panics", "Handler panics recovered (each became INTERNAL)"),
		maxRuntimeRecv: lim.MaxRuntimeRecvBytes,
		streams:        newStreamLimiter(lim.StreamsPerKey, lim.StreamsTotal, meter),
		audit:          opts.Audit,
		storeFull: telemetry.MustCounter(meter, "cycles.store.full_refusals",
			"RPCs refused because Redis reached maxmemory (reason STORE_FULL)"),
	}
	workers := opts.StreamWorkers
	if workers == 0 {
		workers = DefaultStreamWorkers
	}
	if workers < 0 {
		workers = 0
	}
	unary := c.unaryInterceptors()
	gate := &streamGate{authn: authn, public: newPublicGuard(lim, meter)}
	conns := &connStats{}
	serverOpts := append([]grpc.ServerOption{
		grpc.NumStreamWorkers(uint32(workers)),
		grpc.InTapHandle(gate.tap),
		grpc.StatsHandler(conns),
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(c.streamInterceptors()...),
		grpc.MaxRecvMsgSize(lim.MaxRecvMsgBytes),
		grpc.MaxConcurrentStreams(lim.MaxConcurrentStreams),
		grpc.MaxHeaderListSize(lim.MaxHeaderListBytes),
		grpc.ConnectionTimeout(lim.HandshakeTimeout),
		// Keep idle watch streams alive through proxies, reap dead peers and
		// connections that carry no RPC; a client pinging more often than
		// every 10 s is disconnected (GOAWAY "too_many_pings").
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second, MaxConnectionIdle: lim.MaxConnectionIdle}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	}, opts.ServerOptions...)
	g := grpc.NewServer(serverOpts...)
	s := &Server{GRPC: g, Health: health.NewServer(), log: log, unary: unary, limits: lim, authn: authn, conns: conns, meter: meter,
		closures: telemetry.MustCounter(meter, "cycles.conn.limit_closures",
			"Connections closed by a connection-level limit (attribute reason: idle_evicted, no_stream, write_stall, refused_streams, flood_peer, http_unread_body)")}
	for _, svc := range svcs.Provided() {
		g.RegisterService(svc.Desc, svc.Impl)
		s.names = append(s.names, svc.Desc.ServiceName)
	}
	if svcs.Register != nil {
		svcs.Register(g)
	}
	healthpb.RegisterHealthServer(g, s.Health)
	registerReflection(g, log)
	s.setServing(false)
	return s
}

func (s *Server) setServing(ok bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ok {
		st = healthpb.HealthCheckResponse_SERVING
	}
	s.serving.Store(ok)
	s.Health.SetServingStatus("", st)
	for _, n := range s.names {
		s.Health.SetServingStatus(n, st)
	}
}

// Serving reports whether the last Redis probe succeeded (and the server is
// not shutting down).
func (s *Server) Serving() bool { return s.serving.Load() }

// WatchHealth probes ping every interval until ctx ends: SERVING only while
// Redis answers (and, with store.Probe, has room), so load balancers stop
// routing to a replica that would fail closed anyway. It recovers by itself.
// A line is logged when the cause changes, not on every probe.
func (s *Server) WatchHealth(ctx context.Context, ping func(context.Context) error, interval time.Duration) {
	last := ""
	probe := func() {
		pctx, cancel := context.WithTimeout(ctx, interval)
		defer cancel()
		err := ping(pctx)
		if ctx.Err() != nil {
			return
		}
		switch {
		case err != nil && err.Error() != last:
			s.log.Warn("budget store not ready; health NOT_SERVING", zap.Error(err))
			last = err.Error()
		case err == nil && last != "":
			s.log.Info("budget store ready again; health SERVING")
			last = ""
		}
		s.setServing(err == nil)
	}
	probe()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			probe()
		}
	}
}

// Serve serves on lis until Stop, with at most Limits.MaxConnections open
// connections, each watched by the connection guard (connguard.go).
func (s *Server) Serve(lis net.Listener) error {
	g := newConnGuard(lis, s.limits, s.closures)
	s.conns.g.Store(g)
	return s.GRPC.Serve(g)
}

// Stop drains: health goes NOT_SERVING, new RPCs are refused, in-flight RPCs
// get up to grace to finish, then the rest are cut.
func (s *Server) Stop(grace time.Duration) {
	s.serving.Store(false)
	s.Health.Shutdown()
	done := make(chan struct{})
	go func() {
		s.GRPC.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(grace):
		s.log.Warn("shutdown grace elapsed; closing remaining RPCs")
		s.GRPC.Stop()
	}
}
