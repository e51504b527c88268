// Package cycleshttp serves the Cycles protocol's HTTP/JSON wire
// (cycles-protocol-v0, v0.1.25: /v1/reservations, /v1/decide, /v1/events,
// /v1/balances, ...) on cyclesd's HTTP listener, so the existing Cycles SDKs
// work against cyclesd by changing only the base URL and the key.
//
// It is a thin adapter: each route decodes the protocol's JSON into the
// protobuf request of the matching gRPC method and runs that method's own
// handler (internal/api/runtimeapi, ...) through the gRPC interceptor chain in
// process (server.Invoke): auth, the rate-limit guard, validation
// (internal/validate), idempotency and the ledger are the very path gRPC calls
// take. This package only translates JSON and maps errors onto HTTP statuses.
//
// Routes are declared on the RPCs they run, as the (cycles.v1.http) method
// option (proto/cycles/v1/http.proto: pattern, status, body, query
// parameters bound to proto fields by name), and served by one generic
// handler (route.go); wires.go declares beside them the steps no field name
// can say. Bodies are read into the request and answers written in their
// message types' shapes by internal/protowire, which knows messages, not
// routes: a message's differences from its proto are options on the message
// (http.proto's wire options); an answer type whose spec orders or computes
// members otherwise has its shape declared here (answerShapes).
// docs/http-api.md lists the wire rules and what is and is not served.
package cycleshttp

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/defaults"
	"github.com/cyclesgo/cycles-go/internal/protowire"
	"github.com/cyclesgo/cycles-go/internal/reqctx"
	"github.com/cyclesgo/cycles-go/internal/server"
)

// DefaultMaxBodyBytes bounds a request body; larger ones are a 400.
const DefaultMaxBodyBytes = 1 << 20

// Invoker runs a call through the gRPC interceptor chain (*server.Server).
type Invoker interface {
	Invoke(ctx context.Context, fullMethod string, md metadata.MD, req any, h grpc.UnaryHandler) (any, metadata.MD, error)
}

// Options configure the HTTP API.
type Options struct {
	Invoker Invoker
	// Services are the gRPC services the routes call, the very ones the gRPC
	// server registers; a route of a service left nil answers 404 saying why.
	Services server.Services
	// MaxBodyBytes bounds request bodies (0: DefaultMaxBodyBytes).
	MaxBodyBytes   int64
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
}

// API is the Cycles HTTP/JSON surface.
type API struct {
	svc Options // the services (nil: their routes answer 404)
	// calls run the provided services' methods by full name.
	calls   map[string]func(ctx context.Context, req proto.Message) (any, error)
	maxBody int64
	shapes  *protowire.Shapes // the answers' shapes by message type
	mux     *http.ServeMux
	handler http.Handler
}

// New builds the API. Mount it on the HTTP listener under "/v1/".
func New(opts Options) *API {
	a := &API{svc: opts, maxBody: opts.MaxBodyBytes, shapes: answerShapes(), mux: http.NewServeMux()}
	defaults.Set(&a.maxBody, DefaultMaxBodyBytes)
	a.routes()
	// A nil provider leaves otel's global one in place.
	a.handler = withTraceID(otelhttp.NewHandler(a.preAuth(a.mux), "cycles-http",
		otelhttp.WithTracerProvider(opts.TracerProvider), otelhttp.WithMeterProvider(opts.MeterProvider),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
			return cmp.Or(r.Pattern, r.Method+" "+r.URL.Path)
		})))
	return a
}

// preAuth refuses a request whose credentials are missing, malformed, wrong
// or recently refused, or whose peer is over its failed-authentication
// budget, before the body is read (docs/limits.md), by the gRPC shell's own
// check (server.Server.PreAuth).
func (a *API) preAuth(next http.Handler) http.Handler {
	pa, ok := a.svc.Invoker.(interface {
		PreAuth(ctx context.Context, fullMethod string, md metadata.MD, remoteAddr string) (context.Context, error)
	})
	if !ok {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := a.mux.Handler(r); pattern == "/v1/" {
			next.ServeHTTP(w, r) // an unserved path is a 404 for anyone
			return
		}
		// The access rule checked is a method either key may call, so every
		// route's legitimate caller passes; the chain then applies the route's.
		method := cyclesv1.EventService_ListEvents_FullMethodName
		if strings.HasPrefix(r.URL.Path, actionKindsPrefix) {
			method = cyclesv1.ActionKindService_ListActionKinds_FullMethodName // public, like the chain's rule
		}
		ctx, err := pa.PreAuth(r.Context(), method, metadataOf(r), r.RemoteAddr)
		if err != nil {
			p := runtimePlane
			if strings.HasPrefix(r.URL.Path, "/v1/admin/") {
				p = adminPlane
			}
			code, body, extra := errorOf(err, p, "", "")
			// The request's trace id (its traceparent or X-Cycles-Trace-Id,
			// else the span's), as the chain would report it.
			if sc := trace.SpanContextFromContext(r.Context()); sc.HasTraceID() {
				body.TraceID = sc.TraceID().String()
			}
			writeError(w, code, body, extra)
			return
		}
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// ServeHTTP implements http.Handler.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.handler.ServeHTTP(w, r) }

// ---- the one call path ---------------------------------------------------------

// decodeFailed stands in for the request when the body could not be decoded:
// the chain still authenticates first (401 before 400, as the protocol
// orders it), then the handler returns the decode error.
type decodeFailed struct{}

// serve runs one request: req (or decodeErr) through the chain as method
// into call, then render's body with status ok, or the protocol's error body
// in plane p's vocabulary.
func (a *API) serve(w http.ResponseWriter, r *http.Request, method string, p plane, ok int, req any, decodeErr error,
	call func(ctx context.Context, req any) (any, error), render func(resp any) any) {
	var tenant string
	if decodeErr != nil {
		req = decodeFailed{}
	}
	// The chain's one log line per call says which wire it came from.
	ctx := logging.InjectFields(r.Context(), logging.Fields{"transport", "http", "http.route", r.Pattern})
	resp, hdr, err := a.svc.Invoker.Invoke(ctx, method, metadataOf(r), req, func(ctx context.Context, req any) (any, error) {
		if p, ok := auth.FromContext(ctx); ok && !p.Admin { // not the tenant the admin acts for
			tenant = p.Tenant
		}
		if decodeErr != nil {
			return nil, decodeErr
		}
		return call(ctx, req)
	})
	// The ids, the tenant and the chain's rate-limit and deprecation headers.
	requestID, traceID := first(hdr, auth.RequestIDHeader), first(hdr, server.TraceIDHeader)
	headers := map[string]string{"X-Request-Id": requestID, "X-Cycles-Trace-Id": traceID, "X-Cycles-Tenant": tenant}
	for _, k := range []string{server.RateLimitHeader, server.RateLimitRemainingHeader, server.RateLimitResetHeader, server.RetryAfterHeader,
		server.PermissionDeprecatedHeader} {
		headers[k] = first(hdr, k)
	}
	for k, v := range headers {
		if v != "" {
			w.Header().Set(k, v)
		}
	}
	if err == nil && resp == nil { // a handler answering nothing is a bug, not a 200
		err = apierr.New(apierr.InternalError, "internal error").Status(requestID, traceID).Err()
	}
	if err != nil {
		code, body, extra := errorOf(err, p, requestID, traceID)
		writeError(w, code, body, extra)
		return
	}
	writeJSON(w, ok, render(resp))
}

func first(md metadata.MD, k string) string {
	if v := md[k]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// metadataOf carries the HTTP headers the chain reads as gRPC metadata. The
// reference server's admin header (X-Admin-API-Key) is accepted as well as
// cyclesd's own.
func metadataOf(r *http.Request) metadata.MD {
	md := make(metadata.MD, 4)
	h := r.Header.Get
	for k, v := range map[string]string{auth.APIKeyHeader: h("X-Cycles-API-Key"),
		auth.AdminKeyHeader:       cmp.Or(h("X-Cycles-Admin-Key"), h("X-Admin-API-Key")),
		auth.IdempotencyKeyHeader: h("X-Idempotency-Key"), auth.RequestIDHeader: h("X-Request-Id"),
		"user-agent": h("User-Agent")} { // the user agent is recorded in audit entries
		if v != "" {
			md[k] = []string{v}
		}
	}
	return md
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code = http.StatusInternalServerError
		b = []byte(`{"error":"INTERNAL_ERROR","message":"response encoding failed","request_id":""}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

// protoJSON reads the JSON body into the request (which path and query
// parameters have already set).
func protoJSON[Req proto.Message](a *API, w http.ResponseWriter, r *http.Request, req Req) error {
	body, err := a.readBody(w, r)
	if err != nil {
		return err
	}
	return protowire.Decode(body, req.ProtoReflect())
}

// readBody reads a bounded body that is exactly one well-formed JSON value
// (within encoding/json's nesting limit); anything else is a 400 naming body.
func (a *API) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, a.maxBody))
	if big := (*http.MaxBytesError)(nil); errors.As(err, &big) {
		return nil, apierr.Invalid("body", "is larger than %d bytes", a.maxBody)
	}
	if err == nil && json.Valid(body) {
		return body, nil
	}
	if err == nil { // invalid: decode once more only to say where and why
		dec := json.NewDecoder(bytes.NewReader(body))
		if err = dec.Decode(new(json.RawMessage)); err == nil {
			if _, err = dec.Token(); err == nil || errors.Is(err, io.EOF) {
				return nil, apierr.Invalid("body", "has data after the JSON object")
			}
		}
	}
	return nil, protowire.SyntaxError(err)
}

// notFound answers a path no route serves (404), or, when routes serve it
// under other methods, 405 with an Allow header naming them: the route table
// itself is asked, so the answer cannot drift from the routes.
func (a *API) notFound(w http.ResponseWriter, r *http.Request) {
	var allow []string
	probe := r.Clone(r.Context())
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if probe.Method = m; m != r.Method {
			if _, pattern := a.mux.Handler(probe); pattern != "/v1/" && pattern != "" {
				allow = append(allow, m)
			}
		}
	}
	if list := strings.Join(allow, ", "); list != "" {
		w.Header().Set("Allow", list)
		writeBareError(w, r, http.StatusMethodNotAllowed, apierr.InvalidRequest,
			r.Method+" is not allowed on "+r.URL.Path+"; allowed: "+list)
		return
	}
	writeBareError(w, r, http.StatusNotFound, apierr.NotFound,
		"no such endpoint: "+r.Method+" "+r.URL.Path+" (see docs/http-api.md for what cyclesd serves)")
}

// writeBareError answers an error decided before any handler runs (no
// route), still with a request id and trace id as every answer carries.
func writeBareError(w http.ResponseWriter, r *http.Request, code int, reason apierr.Code, msg string) {
	requestID := reqctx.RequestIDOrNew(r.Header.Get("X-Request-Id"))
	traceID := reqctx.NewTraceID()
	if sc := trace.SpanContextFromContext(r.Context()); sc.HasTraceID() {
		traceID = sc.TraceID().String()
	}
	writeError(w, code, &errorOut{Error: string(reason), Message: msg, RequestID: requestID, TraceID: traceID}, nil)
}

// writeError writes the protocol's error body, its request and trace ids
// also as headers. A header the chain has already set (its ids, its rate
// limit's Retry-After) is kept.
func writeError(w http.ResponseWriter, code int, body *errorOut, headers map[string]string) {
	h := w.Header()
	for k, v := range map[string]string{"X-Request-Id": body.RequestID, "X-Cycles-Trace-Id": body.TraceID} {
		if v != "" && h.Get(k) == "" {
			h.Set(k, v)
		}
	}
	for k, v := range headers {
		if h.Get(k) == "" {
			h.Set(k, v)
		}
	}
	writeJSON(w, code, body)
}
