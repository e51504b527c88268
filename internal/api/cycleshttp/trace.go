package cycleshttp

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"

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

// parseTraceparent accepts version 00: "00-<32 hex>-<16 hex>-<2 hex>", ids
// lowercase and not all zero (otel's TraceIDFromHex and SpanIDFromHex check
// exactly that).
func parseTraceparent(s string) (trace.SpanContext, bool) {
	if len(s) != 55 || s[:3] != "00-" || s[35] != '-' || s[52] != '-' {
		return trace.SpanContext{}, false
	}
	tid, ok := parseTraceID(s[3:35])
	if !ok {
		return trace.SpanContext{}, false
	}
	sid, err := trace.SpanIDFromHex(s[36:52])
	if err != nil {
		return trace.SpanContext{}, false
	}
	var flags [1]byte
	if !lowerHex(s[53:55]) {
		return trace.SpanContext{}, false
	}
	if _, err := hex.Decode(flags[:], []byte(s[53:55])); err != nil {
		return trace.SpanContext{}, false
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.TraceFlags(flags[0]), Remote: true}), true
}

// parseTraceID accepts ^[0-9a-f]{32}$, not all zero.
func parseTraceID(s string) (trace.TraceID, bool) {
	tid, err := trace.TraceIDFromHex(s)
	return tid, err == nil
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
