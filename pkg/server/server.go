// Package server is cyclesd's gRPC shell: one place builds the interceptor
// chain (request id, logging, status mapping, recovery, deadline, auth,
// rate-limit guard, validation), registers the services, health and
// reflection, and stops gracefully.
//
// Handlers (pkg/api/...) only translate; domain packages decide; pkg/script
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
	"github.com/cyclesgo/cycles-go/pkg/auth"
	"github.com/cyclesgo/cycles-go/pkg/telemetry"
)

// Options configure the shell.
type Options struct {
	Logger         *zap.Logger
	MeterProvider  metric.MeterProvider
	Verifier       auth.Verifier
	AdminKey       string
	RequestTimeout time.Duration
	// Guard is the optional rate-limit interceptor (runs after auth).
	Guard grpc.UnaryServerInterceptor
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
	// Register adds anything else (e.g. Envoy's rate limit service).
	Register func(*grpc.Server)
}

// Server is the gRPC server with its health service.
type Server struct {
	GRPC    *grpc.Server
	Health  *health.Server
	log     *zap.Logger
	names   []string
	serving atomic.Bool
	// unary is the interceptor chain, kept for Invoke (other transports).
	unary []grpc.UnaryServerInterceptor
}

// New builds the server.
func New(opts Options, svcs Services) *Server {
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	meter := telemetry.Meter(opts.MeterProvider, "server")
	c := &chain{
		log:            log,
		authn:          &authenticator{verifier: opts.Verifier, adminKey: opts.AdminKey},
		guard:          opts.Guard,
		requestTimeout: opts.RequestTimeout,
		panics:         telemetry.MustCounter(meter, "cycles.rpc.panics", "Handler panics recovered (each became INTERNAL)"),
	}
	workers := opts.StreamWorkers
	if workers == 0 {
		workers = DefaultStreamWorkers
	}
	if workers < 0 {
		workers = 0
	}
	unary := c.unaryInterceptors()
	serverOpts := append([]grpc.ServerOption{
		grpc.NumStreamWorkers(uint32(workers)),
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(c.streamInterceptors()...),
		// Keep idle watch streams alive through proxies and reap dead peers.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	}, opts.ServerOptions...)
	g := grpc.NewServer(serverOpts...)
	s := &Server{GRPC: g, Health: health.NewServer(), log: log, unary: unary}
	if svcs.Runtime != nil {
		cyclesv1.RegisterRuntimeServiceServer(g, svcs.Runtime)
		s.names = append(s.names, cyclesv1.RuntimeService_ServiceDesc.ServiceName)
	}
	if svcs.Admin != nil {
		cyclesv1.RegisterAdminServiceServer(g, svcs.Admin)
		s.names = append(s.names, cyclesv1.AdminService_ServiceDesc.ServiceName)
	}
	if svcs.Events != nil {
		cyclesv1.RegisterEventServiceServer(g, svcs.Events)
		s.names = append(s.names, cyclesv1.EventService_ServiceDesc.ServiceName)
	}
	if svcs.RateLimit != nil {
		cyclesv1.RegisterRateLimitServiceServer(g, svcs.RateLimit)
		s.names = append(s.names, cyclesv1.RateLimitService_ServiceDesc.ServiceName)
	}
	if svcs.Ops != nil {
		cyclesv1.RegisterOpsServiceServer(g, svcs.Ops)
		s.names = append(s.names, cyclesv1.OpsService_ServiceDesc.ServiceName)
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
// Redis answers, so load balancers stop routing to a replica that would fail
// closed anyway. It recovers by itself when Redis returns.
func (s *Server) WatchHealth(ctx context.Context, ping func(context.Context) error, interval time.Duration) {
	probe := func() {
		pctx, cancel := context.WithTimeout(ctx, interval)
		defer cancel()
		err := ping(pctx)
		if err != nil && ctx.Err() == nil {
			s.log.Warn("budget store unreachable; health NOT_SERVING", zap.Error(err))
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

// Serve serves on lis until Stop.
func (s *Server) Serve(lis net.Listener) error { return s.GRPC.Serve(lis) }

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
