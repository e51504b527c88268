package cycleshttp

import (
	"crypto/rand"
	"net/http"
	"regexp"
	"strconv"

	"go.opentelemetry.io/otel/trace"
)

// withTraceID puts the caller's trace id into the request context by the
// protocol's precedence (CORRELATION AND TRACING): a valid W3C traceparent,
// else a valid X-Cycles-Trace-Id, else none (the chain then makes one). A
// malformed header is ignored, never refused. The chain's request-id step
// reads the trace id from the span context, as it does for gRPC.
func withTraceID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if sc, ok := incomingTrace(r.Header); ok {
			r = r.WithContext(trace.ContextWithRemoteSpanContext(r.Context(), sc))
		}
		next.ServeHTTP(w, r)
	})
}

func incomingTrace(h http.Header) (trace.SpanContext, bool) {
	if sc, ok := parseTraceparent(h.Get("traceparent")); ok {
		return sc, true
	}
	if tid, ok := parseTraceID(h.Get("X-Cycles-Trace-Id")); ok {
		var sid trace.SpanID
		_, _ = rand.Read(sid[:])
		return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true}), true
	}
	return trace.SpanContext{}, false
}

// traceparent is version 00 of the W3C header: lower-case hex trace id,
// span id and flags.
var traceparent = regexp.MustCompile(`^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$`)

// parseTraceparent accepts a version 00 traceparent whose ids are not all
// zero (otel's TraceIDFromHex and SpanIDFromHex check that).
func parseTraceparent(s string) (trace.SpanContext, bool) {
	p := traceparent.FindStringSubmatch(s)
	if p == nil {
		return trace.SpanContext{}, false
	}
	tid, terr := trace.TraceIDFromHex(p[1])
	sid, serr := trace.SpanIDFromHex(p[2])
	flags, ferr := strconv.ParseUint(p[3], 16, 8)
	if terr != nil || serr != nil || ferr != nil {
		return trace.SpanContext{}, false
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.TraceFlags(flags), Remote: true}), true
}

// parseTraceID accepts ^[0-9a-f]{32}$, not all zero.
func parseTraceID(s string) (trace.TraceID, bool) {
	tid, err := trace.TraceIDFromHex(s)
	return tid, err == nil
}
