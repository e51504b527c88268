// Package app wires cyclesd together: configuration → store → script
// executor → domain packages → handlers → gRPC shell, plus the background
// workers, and runs them until the context ends.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sync/errgroup"
	"golang.org/x/term"

	"github.com/cyclesgo/cycles-go/internal/api/cycleshttp"
	"github.com/cyclesgo/cycles-go/internal/config"
	"github.com/cyclesgo/cycles-go/internal/ratelimit"
	"github.com/cyclesgo/cycles-go/internal/script"
	"github.com/cyclesgo/cycles-go/internal/server"
	"github.com/cyclesgo/cycles-go/internal/store"
	"github.com/cyclesgo/cycles-go/internal/telemetry"
	"github.com/cyclesgo/cycles-go/internal/tlsconfig"
)

// NewLogger builds the zap logger of cfg, writing to stderr.
func NewLogger(cfg *config.Config) (*zap.Logger, error) {
	return newLogger(cfg, zapcore.Lock(os.Stderr), term.IsTerminal(int(os.Stderr.Fd())))
}

// newLogger builds the logger on w. Console output is coloured only on a
// terminal (colour codes in a file or a pipe are noise); stack traces are
// kept for errors (a warning is an expected condition, not a crash);
// durations print with their unit ("5s", "750ms") in both formats.
func newLogger(cfg *config.Config, w zapcore.WriteSyncer, tty bool) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(cfg.LogLevel)
	if err != nil {
		return nil, fmt.Errorf("log level: %w", err)
	}
	var enc zapcore.Encoder
	if cfg.LogFormat == "console" {
		ec := zap.NewDevelopmentEncoderConfig()
		ec.EncodeLevel = zapcore.CapitalLevelEncoder
		if tty {
			ec.EncodeLevel = zapcore.CapitalColorLevelEncoder
		}
		ec.EncodeDuration = zapcore.StringDurationEncoder
		enc = zapcore.NewConsoleEncoder(ec)
	} else {
		ec := zap.NewProductionEncoderConfig()
		ec.EncodeTime = zapcore.ISO8601TimeEncoder
		ec.EncodeDuration = zapcore.StringDurationEncoder
		enc = zapcore.NewJSONEncoder(ec)
	}
	core := zapcore.NewCore(enc, w, zap.NewAtomicLevelAt(lvl))
	if cfg.LogFormat != "console" {
		// As zap's production preset: past 100 identical lines in a second,
		// every 100th is kept, so a flood of one error cannot swamp the sink.
		core = zapcore.NewSamplerWithOptions(core, time.Second, 100, 100)
	}
	return zap.New(core, zap.AddCaller(), zap.AddStacktrace(zapcore.ErrorLevel), zap.ErrorOutput(w)), nil
}

// Run starts cyclesd and blocks until ctx is done, then shuts down
// gracefully. Banner text (dev mode) goes to out.
func Run(ctx context.Context, cfg *config.Config, out io.Writer) error {
	log, err := NewLogger(cfg)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()

	st, err := store.Open(cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	if cfg.Dev() {
		log.Warn("DEV MODE: no Redis address configured; using the embedded in-process store. Nothing is durable: all budgets vanish when cyclesd stops.")
		if cfg.AdminKey == "" {
			cfg.AdminKey = DevAdminKey
		}
	}

	startCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := st.Ping(startCtx); err != nil {
		return fmt.Errorf("redis unreachable at start: %w", err)
	}
	if err := st.CheckEvictionPolicy(startCtx); err != nil {
		var ep *store.ErrEvictionPolicy
		if !errors.As(err, &ep) || !cfg.AllowEvictionPolicy {
			return err
		}
		log.Warn("starting despite an evicting maxmemory-policy (-allow-eviction-policy)", zap.String("policy", ep.Policy))
	}
	tel, err := telemetry.Setup(ctx, "cyclesd")
	if err != nil {
		return err
	}
	defer func() { _ = tel.Shutdown(context.Background()) }()
	if err := telemetry.RegisterRuntime(tel.Meter); err != nil {
		return err
	}

	execOpts := []script.Option{script.WithTracerProvider(tel.Tracer)}
	if flags, err := st.ScriptFlags(startCtx); err != nil {
		return fmt.Errorf("redis version: %w", err)
	} else if flags {
		// Redis 7: the scripts are Functions (libraries defined once per
		// master, not on every call: internal/script/function.go) with their
		// flags: commit, release, expiry and revocation run even when Redis
		// is full (allow-oom), and so do reads (no-writes).
		execOpts = append(execOpts, script.WithFunctions())
	} else if !cfg.Dev() {
		log.Warn("Redis before 7: scripts run without allow-oom, so when Redis is full commit, release and key revocation are refused too")
	}
	exec, err := script.New(st.Client, execOpts...)
	if err != nil {
		return err
	}
	if err := exec.Load(startCtx); err != nil {
		return fmt.Errorf("load scripts: %w", err)
	}

	// Stream work runs on its own pool, each call bounded like an RPC; it
	// shares the compiled scripts.
	streamExec := exec.WithClient(st.Streams, script.WithTracerProvider(tel.Tracer), script.WithCallTimeout(cfg.RequestTimeout))
	comp, err := build(cfg, log, tel.Meter, exec, streamExec)
	if err != nil {
		return err
	}
	if cfg.GuardPolicy == ratelimit.DefaultGuardPolicyName {
		// The default guard: create its policy unless it exists (an
		// operator's edits to it stand). -guard-policy '' turns it off.
		created, err := comp.limiter.EnsurePolicy(startCtx, ratelimit.DefaultGuardPolicy())
		if err != nil {
			return fmt.Errorf("default guard policy: %w", err)
		}
		if created {
			p := ratelimit.DefaultGuardPolicy()
			log.Info("created the default guard policy", zap.String("policy", p.Name),
				zap.Int64("limit", p.Limit), zap.Int64("window_ms", p.WindowMs))
		}
	}
	arc, arcWorkers, arcWarnings, err := openArchive(startCtx, cfg, log, tel.Meter, exec)
	if err != nil {
		return err
	}
	if arc != nil {
		defer arc.Close()
		comp.workers = append(comp.workers, arcWorkers...)
		comp.archived.store = arc
	}
	serverOpts := []grpc.ServerOption{grpc.StatsHandler(otelgrpc.NewServerHandler(
		otelgrpc.WithTracerProvider(tel.Tracer), otelgrpc.WithMeterProvider(tel.Meter)))}
	if cfg.TLSCert != "" {
		tc, err := tlsconfig.Server(cfg.TLSCert, cfg.TLSKey, cfg.TLSClientCA)
		if err != nil {
			return err
		}
		serverOpts = append(serverOpts, grpc.Creds(credentials.NewTLS(tc)))
	}
	srv := server.New(server.Options{
		Logger:         log,
		MeterProvider:  tel.Meter,
		Verifier:       comp.verifier,
		AdminKey:       cfg.AdminKey,
		RequestTimeout: cfg.RequestTimeout,
		Guard:          comp.guard,
		Inner:          comp.inner,
		ServerOptions:  serverOpts,
		Limits:         limits(cfg),
		Audit:          comp.audit,
	}, comp.services)

	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	warnPlaintext(log, cfg, "gRPC", lis.Addr())
	log.Info("cyclesd listening", zap.String("addr", lis.Addr().String()), zap.Bool("dev", cfg.Dev()),
		zap.Bool("tls", cfg.TLSCert != ""), zap.Bool("mtls", cfg.TLSClientCA != ""))
	if cfg.Dev() && cfg.DevSeed {
		if err := seedDev(ctx, comp, cfg, lis.Addr().String(), out); err != nil {
			return fmt.Errorf("dev seed: %w", err)
		}
	}

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return srv.Serve(lis) })
	if cfg.HTTPListen != "" {
		hs := srv.NewHTTP(server.HTTPOptions{Logger: log.Named("http"), MaxConnections: cfg.HTTPMaxConnections,
			MaxBodyBytes: int64(cfg.HTTPMaxBodyBytes), ReadyWarnings: arcWarnings})
		// Connect, gRPC-Web and JSON for every cycles.v1 service (docs/clients.md).
		if err := hs.MountConnect(0, cfg.CORSOrigins()...); err != nil {
			return err
		}

		// The Cycles HTTP/JSON wire (docs/http-api.md): the same handlers
		// through the same interceptor chain as gRPC.
		hs.Handle("/v1/", cycleshttp.New(cycleshttp.Options{Invoker: srv, Services: comp.services, TracerProvider: tel.Tracer, MeterProvider: tel.Meter}))
		if cfg.TLSCert != "" {
			tc, err := tlsconfig.Server(cfg.TLSCert, cfg.TLSKey, cfg.TLSClientCA)
			if err != nil {
				return err
			}
			hs.Server().TLSConfig = tc
		}
		hlis, err := net.Listen("tcp", cfg.HTTPListen)
		if err != nil {
			return fmt.Errorf("http listen %s: %w", cfg.HTTPListen, err)
		}
		warnPlaintext(log, cfg, "HTTP", hlis.Addr())
		log.Info("cyclesd HTTP listening", zap.String("addr", hlis.Addr().String()), zap.Bool("tls", cfg.TLSCert != ""))
		g.Go(func() error { return hs.Serve(hlis) })
		g.Go(func() error {
			<-gctx.Done()
			sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownGrace)
			defer cancel()
			hs.Shutdown(sctx)
			return nil
		})
	}
	if cfg.MetricsAddr != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", tel.Metrics)
		hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		// Listen here, not in the goroutine: the log names the bound
		// address (the real port of -metrics-addr 127.0.0.1:0).
		mlis, err := net.Listen("tcp", cfg.MetricsAddr)
		if err != nil {
			return fmt.Errorf("metrics listener: %w", err)
		}
		g.Go(func() error {
			if err := hs.Serve(mlis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("metrics listener: %w", err)
			}
			return nil
		})
		g.Go(func() error {
			<-gctx.Done()
			return hs.Close()
		})
		log.Info("metrics listening", zap.String("addr", mlis.Addr().String()))
	}
	g.Go(func() error {
		srv.WatchHealth(gctx, st.Probe, cfg.HealthInterval)
		return nil
	})
	for _, w := range comp.workers {
		g.Go(func() error { return w(gctx) })
	}
	g.Go(func() error {
		<-gctx.Done()
		log.Info("shutting down: draining in-flight RPCs", zap.Duration("grace", cfg.ShutdownGrace))
		srv.Stop(cfg.ShutdownGrace)
		comp.flushFeed()
		return nil
	})
	err = g.Wait()
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	log.Info("cyclesd stopped")
	return nil
}

// limits maps the limit flags onto the gRPC shell (docs/limits.md).
func limits(cfg *config.Config) server.Limits {
	burst := cfg.AuthFailBurst
	if burst == 0 {
		burst = -1 // off
	}
	floodPeers := cfg.FloodClosuresPerPeer
	if floodPeers == 0 {
		floodPeers = -1 // off
	}
	return server.Limits{
		MaxRecvMsgBytes:       cfg.MaxRecvMsgBytes,
		MaxRuntimeRecvBytes:   cfg.MaxRuntimeRecvBytes,
		MaxConcurrentStreams:  uint32(cfg.MaxConcurrentStreams),
		MaxHeaderListBytes:    uint32(cfg.MaxHeaderListBytes),
		MaxConnections:        cfg.MaxConnections,
		RefusedStreamsPerConn: cfg.RefusedStreamsPerConn,
		FloodClosuresPerPeer:  floodPeers,
		FloodPeerCooldown:     cfg.FloodPeerCooldown,
		HandshakeTimeout:      cfg.HandshakeTimeout,
		MaxConnectionIdle:     cfg.MaxConnectionIdle,
		StreamsPerKey:         cfg.StreamsPerKey,
		StreamsTotal:          cfg.StreamsTotal,
		PreAuth: server.PreAuthLimits{
			AuthFailBurst:            burst,
			AuthFailRate:             cfg.AuthFailRate,
			UnverifiedPerFailingPeer: cfg.UnverifiedPerFailingPeer,
			UnverifiedKeysPerPeer:    cfg.UnverifiedKeysPerPeer,
		},
	}
}

// warnPlaintext warns when a listener without TLS is reachable beyond this
// host: API and admin keys would cross the network in clear. (Behind a
// TLS-terminating proxy or mesh on the same host this is expected.)
func warnPlaintext(log *zap.Logger, cfg *config.Config, name string, addr net.Addr) {
	if cfg.TLSCert != "" {
		return
	}
	if ta, ok := addr.(*net.TCPAddr); ok && ta.IP.IsLoopback() {
		return
	}
	log.Warn("plaintext "+name+" listener on a non-loopback address: API and admin keys cross the network unencrypted; "+
		"set -tls-cert/-tls-key, or listen on loopback behind a TLS-terminating proxy", zap.String("addr", addr.String()))
}
