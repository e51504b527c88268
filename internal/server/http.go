package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/cyclesgo/cycles-go/internal/defaults"
	"github.com/cyclesgo/cycles-go/internal/reqctx"

	"go.uber.org/zap"
	"golang.org/x/net/netutil"
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
	// MaxConnections bounds open connections (0: 1024).
	MaxConnections int
	// MaxBodyBytes is the body limit of every route: LimitBody and the
	// Connect transcoder (0: 1 MiB; the largest request in the contract, a
	// batch admin call, is a few KiB).
	MaxBodyBytes int64
	// BodyTimeout and MinBodyRate bound how long a request body may take:
	// the whole body must arrive within BodyTimeout plus its length at
	// MinBodyRate bytes per second (0: 10 s and 64 KiB/s; a 1 MiB body thus
	// gets 26 s). A body that is trickled or never sent fails its read and
	// the connection closes.
	BodyTimeout time.Duration
	MinBodyRate int64
	// ReadyWarnings, when set, names conditions an operator must look at
	// that do not make this replica unfit to serve (an archive lagging
	// behind): /readyz stays 200 UP and lists them under "warnings".
	ReadyWarnings func() []string
}

// DefaultHTTPOptions are safe limits for a public listener.
func DefaultHTTPOptions() HTTPOptions {
	return HTTPOptions{
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		MaxConnections:    1024,
		MaxBodyBytes:      1 << 20,
		BodyTimeout:       10 * time.Second,
		MinBodyRate:       64 << 10,
	}
}

// HTTPServer is cyclesd's HTTP listener: one net/http mux with the health
// endpoints built in; transports add their routes with Handle.
type HTTPServer struct {
	mux  *http.ServeMux
	srv  *http.Server
	log  *zap.Logger
	core *Server
	opts HTTPOptions
}

// NewHTTP builds the HTTP listener. Its readiness follows the same Redis
// probe as gRPC health (WatchHealth on s).
func (s *Server) NewHTTP(opts HTTPOptions) *HTTPServer {
	defaults.Fill(&opts, DefaultHTTPOptions())
	log := opts.Logger
	if log == nil {
		log = s.log
	}
	h := &HTTPServer{mux: http.NewServeMux(), log: log, core: s, opts: opts}
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
	// Its liveness path, and the aggregate one its deployments probe (ready
	// while Redis answers, as readiness).
	h.mux.HandleFunc("GET /actuator/health/liveness", h.live)
	h.mux.HandleFunc("GET /actuator/health", h.ready)
	return h
}

// Handle registers a route (net/http pattern syntax, e.g. "POST /v1/decide");
// its request bodies are limited to MaxBodyBytes and to the body deadline
// (LimitBody, BodyDeadline).
func (h *HTTPServer) Handle(pattern string, handler http.Handler) {
	h.mux.Handle(pattern, BodyDeadline(LimitBody(handler, h.opts.MaxBodyBytes), h.opts.BodyTimeout, h.opts.MinBodyRate, h.core.closures))
}

// Server is the underlying http.Server (TLS configuration goes here).
func (h *HTTPServer) Server() *http.Server { return h.srv }

// MaxBodyBytes is the listener's request body limit (for LimitBody).
func (h *HTTPServer) MaxBodyBytes() int64 { return h.opts.MaxBodyBytes }

// LimitBody wraps a route so its request body is cut at n bytes: a request
// declaring a longer Content-Length is refused with 400 INVALID_REQUEST (the
// Cycles error body, docs/http-api.md) before any of it is read, and the
// connection closes; a body that turns out longer fails its read
// (http.MaxBytesReader), which the route reports as INVALID_REQUEST too.
// Transports on this listener authenticate from the headers before reading
// the body, as the gRPC tap does (docs/limits.md).
func LimitBody(h http.Handler, n int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > n {
			w.Header().Set("Connection", "close")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]any{
				"error":      "INVALID_REQUEST",
				"message":    fmt.Sprintf("request body is %d bytes; the limit is %d", r.ContentLength, n),
				"request_id": reqctx.RequestIDOrNew(r.Header.Get("X-Request-Id")),
				"details":    map[string]string{"field": "body", "limit": "http_body_bytes"},
			})
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, n)
		h.ServeHTTP(w, r)
	})
}

// BodyDeadline wraps a route so that
//   - its request body must arrive within timeout plus its declared length
//     (or the route's limit, for a chunked body) at minRate bytes/s: the
//     connection's read deadline, so a trickled body fails its read;
//   - an error answered before the body was read whole (401, 403, 413,
//     429: pre-auth refusals) closes the connection instead of draining the
//     body first, which net/http would otherwise do before writing the
//     answer (up to 256 KiB, at the sender's pace). Each such closure counts
//     in closures (reason http_unread_body).
func BodyDeadline(h http.Handler, timeout time.Duration, minRate int64, closures metric.Int64Counter) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			h.ServeHTTP(w, r)
			return
		}
		size := r.ContentLength
		if size < 0 {
			size = 1 << 20
		}
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(timeout + time.Duration(size*int64(time.Second)/minRate)))
		body := &trackedBody{ReadCloser: r.Body}
		r.Body = body
		h.ServeHTTP(&unreadCloser{ResponseWriter: w, body: body, ctx: r.Context(), closures: closures}, r)
	})
}

// trackedBody notes when its body has been read to the end.
type trackedBody struct {
	io.ReadCloser
	done atomic.Bool
}

func (b *trackedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.done.Store(true)
	}
	return n, err
}

// unreadCloser marks an error answer written before the body was read as
// the connection's last.
type unreadCloser struct {
	http.ResponseWriter
	body     *trackedBody
	ctx      context.Context
	closures metric.Int64Counter
	wrote    bool
}

func (u *unreadCloser) WriteHeader(code int) {
	if !u.wrote {
		u.wrote = true
		if code >= 400 && !u.body.done.Load() {
			u.Header().Set("Connection", "close")
			if u.closures != nil {
				u.closures.Add(context.WithoutCancel(u.ctx), 1, metric.WithAttributes(attribute.String("reason", "http_unread_body")))
			}
		}
	}
	u.ResponseWriter.WriteHeader(code)
}

func (u *unreadCloser) Write(p []byte) (int, error) {
	if !u.wrote {
		u.WriteHeader(http.StatusOK)
	}
	return u.ResponseWriter.Write(p)
}

// Flush and Unwrap keep streaming answers and http.ResponseController working.
func (u *unreadCloser) Flush() {
	if f, ok := u.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (u *unreadCloser) Unwrap() http.ResponseWriter { return u.ResponseWriter }

// Serve serves on lis until Shutdown, with at most MaxConnections open
// connections; with a TLS config on Server() it serves TLS.
func (h *HTTPServer) Serve(lis net.Listener) error {
	lis = netutil.LimitListener(lis, h.opts.MaxConnections)
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
	up := h.core.Serving()
	if up && h.opts.ReadyWarnings != nil {
		if warn := h.opts.ReadyWarnings(); len(warn) > 0 {
			body, err := json.Marshal(struct {
				Status   string   `json:"status"`
				Warnings []string `json:"warnings"`
			}{"UP", warn})
			if err == nil {
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Cache-Control", "no-store")
				_, _ = w.Write(body)
				return
			}
		}
	}
	writeHealth(w, up)
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
