package server

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"go.uber.org/zap"
)

// HTTPOptions configure the HTTP listener that sits beside the gRPC one.
// Transports mounted on it (the Cycles HTTP/JSON wire, Connect/gRPC-Web) are
// thin adapters over the same domain packages; the listener itself only
// carries limits, health and routing.
type HTTPOptions struct {
	Logger *zap.Logger
	// ReadHeaderTimeout bounds how long a connection may take to send its
	// request headers (slowloris); IdleTimeout reaps idle keep-alives.
	ReadHeaderTimeout time.Duration
	IdleTimeout       time.Duration
	// MaxHeaderBytes bounds the request headers a caller can make us hold.
	MaxHeaderBytes int
}

// DefaultHTTPOptions are safe limits for a public listener.
func DefaultHTTPOptions() HTTPOptions {
	return HTTPOptions{
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
}

// HTTPServer is cyclesd's HTTP listener: one net/http mux with the health
// endpoints built in; transports add their routes with Handle.
type HTTPServer struct {
	mux  *http.ServeMux
	srv  *http.Server
	log  *zap.Logger
	core *Server
}

// NewHTTP builds the HTTP listener. Its readiness follows the same Redis
// probe as gRPC health (WatchHealth on s).
func (s *Server) NewHTTP(opts HTTPOptions) *HTTPServer {
	def := DefaultHTTPOptions()
	if opts.ReadHeaderTimeout <= 0 {
		opts.ReadHeaderTimeout = def.ReadHeaderTimeout
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = def.IdleTimeout
	}
	if opts.MaxHeaderBytes <= 0 {
		opts.MaxHeaderBytes = def.MaxHeaderBytes
	}
	log := opts.Logger
	if log == nil {
		log = s.log
	}
	h := &HTTPServer{mux: http.NewServeMux(), log: log, core: s}
	h.srv = &http.Server{
		Handler:           h.mux,
		ReadHeaderTimeout: opts.ReadHeaderTimeout,
		IdleTimeout:       opts.IdleTimeout,
		MaxHeaderBytes:    opts.MaxHeaderBytes,
		ErrorLog:          zap.NewStdLog(log.Named("http")),
	}
	h.mux.HandleFunc("GET /healthz", h.live)
	h.mux.HandleFunc("GET /readyz", h.ready)
	// The Cycles reference server's readiness path; the Cycles SDKs' live
	// tests probe it without credentials.
	h.mux.HandleFunc("GET /actuator/health/readiness", h.ready)
	return h
}

// Handle registers a route (net/http pattern syntax, e.g. "POST /v1/decide").
func (h *HTTPServer) Handle(pattern string, handler http.Handler) { h.mux.Handle(pattern, handler) }

// Server is the underlying http.Server (TLS configuration goes here).
func (h *HTTPServer) Server() *http.Server { return h.srv }

// Serve serves on lis until Shutdown; with a TLS config on Server() it serves TLS.
func (h *HTTPServer) Serve(lis net.Listener) error {
	var err error
	if h.srv.TLSConfig != nil {
		err = h.srv.ServeTLS(lis, "", "")
	} else {
		err = h.srv.Serve(lis)
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops accepting, waits for in-flight requests until ctx ends,
// then closes what is left.
func (h *HTTPServer) Shutdown(ctx context.Context) {
	if err := h.srv.Shutdown(ctx); err != nil {
		h.log.Warn("HTTP shutdown grace elapsed; closing remaining connections", zap.Error(err))
		_ = h.srv.Close()
	}
}

func (h *HTTPServer) live(w http.ResponseWriter, _ *http.Request) {
	writeHealth(w, true)
}

func (h *HTTPServer) ready(w http.ResponseWriter, _ *http.Request) {
	writeHealth(w, h.core.Serving())
}

// writeHealth answers in the shape Spring's actuator uses ({"status":"UP"}),
// which the Cycles SDKs' probes read.
func writeHealth(w http.ResponseWriter, up bool) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if !up {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"status":"DOWN"}`))
		return
	}
	_, _ = w.Write([]byte(`{"status":"UP"}`))
}
