package server

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"connectrpc.com/connect"
	connectcors "connectrpc.com/cors"
	"connectrpc.com/vanguard"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/defaults"
)

// MountConnect serves every registered cycles.v1 service over the Connect
// protocol (JSON or binary, unary and server streaming), gRPC-Web and gRPC
// on the HTTP listener, at the usual "/<service>/<method>" paths.
//
// It is a transcoder, not a second implementation: connectrpc.com/vanguard
// rewrites each request into gRPC and hands it in process to the gRPC
// server's own ServeHTTP, so the call runs through the same interceptor
// chain (request id, logging, status mapping, recovery, deadline, auth,
// guard, validation), stats handler and handlers as a native gRPC call.
// Errors keep their google.rpc details (ErrorInfo, RetryInfo): Connect
// clients get them in the error JSON's "details".
//
// maxBody caps each request body (<= 0: the listener's MaxBodyBytes, the
// same bound as every other HTTP route; -http-max-body-bytes); a larger
// body is refused before any handler runs. corsOrigins are the browser
// origins allowed to call cross-origin (exact match, or "*"); none: no CORS
// headers, so only same-origin pages and non-browser clients can call.
func (h *HTTPServer) MountConnect(maxBody int64, corsOrigins ...string) error {
	defaults.Set(&maxBody, h.opts.MaxBodyBytes)
	var services []*vanguard.Service
	var paths []string
	for _, name := range h.core.names {
		if !strings.HasPrefix(name, "cycles.v1.") {
			continue
		}
		services = append(services, vanguard.NewService(name, h.core.GRPC,
			vanguard.WithTargetProtocols(vanguard.ProtocolGRPC),
			vanguard.WithTargetCodecs(vanguard.CodecProto),
			vanguard.WithMaxMessageBufferBytes(uint32(maxBody)),
		))
		paths = append(paths, "/"+name+"/")
	}
	if len(services) == 0 {
		return nil
	}
	tc, err := vanguard.NewTranscoder(services)
	if err != nil {
		return fmt.Errorf("connect transcoder: %w", err)
	}
	handler := withCORS(BodyDeadline(http.MaxBytesHandler(connectUnaryByDefault(h.core.connectPreAuth(tc)), maxBody),
		h.opts.BodyTimeout, h.opts.MinBodyRate, h.core.closures), corsOrigins)
	for _, p := range paths {
		h.mux.Handle(p, handler)
	}
	return nil
}

// connectPreAuth gives Connect, gRPC-Web and gRPC-over-HTTP/1 calls the
// tap's checks before their body is read (the transcoder hands calls to the
// gRPC server's ServeHTTP, which runs no tap): the path is the full method,
// the headers are the metadata. A refusal is written in the caller's own
// protocol, with the same ErrorInfo a gRPC caller gets.
func (s *Server) connectPreAuth(next http.Handler) http.Handler {
	ew := connect.NewErrorWriter()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !ew.IsSupported(r) {
			next.ServeHTTP(w, r)
			return
		}
		md := metadata.MD{}
		for _, k := range []string{auth.APIKeyHeader, auth.AdminKeyHeader, auth.RequestIDHeader} {
			if v := r.Header.Values(k); len(v) > 0 {
				md[k] = v
			}
		}
		if _, err := s.PreAuth(r.Context(), r.URL.Path, md, r.RemoteAddr); err != nil {
			// The body is not read: end the connection after this answer
			// rather than drain it (gRPC-Web refusals are 200s).
			w.Header().Set("Connection", "close")
			_ = ew.Write(w, r, connectError(err))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// connectError carries a gRPC status, details included, as a Connect error.
func connectError(err error) *connect.Error {
	st := status.Convert(err)
	ce := connect.NewError(connect.Code(st.Code()), errors.New(st.Message()))
	for _, d := range st.Details() {
		if m, ok := d.(proto.Message); ok {
			if detail, derr := connect.NewErrorDetail(m); derr == nil {
				ce.AddDetail(detail)
			}
		}
	}
	return ce
}

// connectUnaryByDefault marks a POST with a unary Connect content type
// (application/json, application/proto) as Connect even without the
// Connect-Protocol-Version header, as connect-go servers do by default, so a
// plain `curl -H 'Content-Type: application/json' -d '{...}'` is a Connect
// call (with Connect's error JSON) rather than vanguard's REST fallback,
// which has no routes here.
func connectUnaryByDefault(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.Header.Get("Connect-Protocol-Version") == "" {
			switch ct := r.Header.Get("Content-Type"); {
			case ct == "application/json", ct == "application/proto",
				strings.HasPrefix(ct, "application/json;"):
				r.Header.Set("Connect-Protocol-Version", "1")
			}
		}
		next.ServeHTTP(w, r)
	})
}

// withCORS answers CORS preflights and tags responses for the allowed
// origins, with the header lists Connect and gRPC-Web need (plus the cyclesd
// credential headers, and x-request-id exposed). Credentials travel in
// headers, never cookies, so no Allow-Credentials.
func withCORS(next http.Handler, origins []string) http.Handler {
	if len(origins) == 0 {
		return next
	}
	allowed := make(map[string]bool, len(origins))
	for _, o := range origins {
		allowed[o] = true
	}
	methods := strings.Join(connectcors.AllowedMethods(), ", ")
	headers := strings.Join(append(connectcors.AllowedHeaders(), "X-Cycles-Api-Key", "X-Cycles-Admin-Key", "X-Idempotency-Key"), ", ")
	exposed := strings.Join(append(connectcors.ExposedHeaders(), "X-Request-Id", "Retry-After"), ", ")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin == "" || !(allowed[origin] || allowed["*"]) {
			next.ServeHTTP(w, r)
			return
		}
		hd := w.Header()
		hd.Add("Vary", "Origin")
		hd.Set("Access-Control-Allow-Origin", origin)
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			hd.Set("Access-Control-Allow-Methods", methods)
			hd.Set("Access-Control-Allow-Headers", headers)
			hd.Set("Access-Control-Max-Age", strconv.Itoa(7200))
			w.WriteHeader(http.StatusNoContent)
			return
		}
		hd.Set("Access-Control-Expose-Headers", exposed)
		next.ServeHTTP(w, r)
	})
}
