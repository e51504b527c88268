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
		sc, ok := parseTraceparent(r.Header.Get("traceparent"))
		// X-Cycles-Trace-Id: ^[0-9a-f]{32}$, not all zero (TraceIDFromHex).
		if tid, err := trace.TraceIDFromHex(r.Header.Get("X-Cycles-Trace-Id")); !ok && err == nil {
			var sid trace.SpanID
			_, _ = rand.Read(sid[:])
			sc, ok = trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true}), true
		}
		if ok {
			r = r.WithContext(trace.ContextWithRemoteSpanContext(r.Context(), sc))
		}
		next.ServeHTTP(w, r)
	})
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
	flags, _ := strconv.ParseUint(p[3], 16, 8) // two hex digits, as matched
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.TraceFlags(flags), Remote: true}),
		terr == nil && serr == nil
}
