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
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sync/errgroup"

	"github.com/cyclesgo/cycles-go/pkg/config"
	"github.com/cyclesgo/cycles-go/pkg/script"
	"github.com/cyclesgo/cycles-go/pkg/server"
	"github.com/cyclesgo/cycles-go/pkg/store"
	"github.com/cyclesgo/cycles-go/pkg/telemetry"
	"github.com/cyclesgo/cycles-go/pkg/tlsconfig"
)

// NewLogger builds the zap logger of cfg.
func NewLogger(cfg *config.Config) (*zap.Logger, error) {
	var zc zap.Config
	if cfg.LogFormat == "console" {
		zc = zap.NewDevelopmentConfig()
		zc.EncoderConfig.EncodeLevel = zapcore.CapitalColorLevelEncoder
	} else {
		zc = zap.NewProductionConfig()
	}
	lvl, err := zapcore.ParseLevel(cfg.LogLevel)
	if err != nil {
		return nil, fmt.Errorf("log level: %w", err)
	}
	zc.Level = zap.NewAtomicLevelAt(lvl)
	return zc.Build()
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

	exec, err := script.New(st.Client, script.WithTracerProvider(tel.Tracer))
	if err != nil {
		return err
	}
	if err := exec.Load(startCtx); err != nil {
		return fmt.Errorf("load scripts: %w", err)
	}

	comp, err := build(cfg, log, tel.Meter, exec)
	if err != nil {
		return err
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
		ServerOptions:  serverOpts,
	}, comp.services)

	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
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
		hs := srv.NewHTTP(server.HTTPOptions{Logger: log.Named("http")})
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
		hs := &http.Server{Addr: cfg.MetricsAddr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		g.Go(func() error {
			if err := hs.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("metrics listener: %w", err)
			}
			return nil
		})
		g.Go(func() error {
			<-gctx.Done()
			return hs.Close()
		})
		log.Info("metrics listening", zap.String("addr", cfg.MetricsAddr))
	}
	g.Go(func() error {
		srv.WatchHealth(gctx, st.Ping, cfg.HealthInterval)
		return nil
	})
	for _, w := range comp.workers {
		w := w
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
