// Package reqctx carries per-request identifiers (request id, trace id)
// through a context, from the interceptors down to event emission and errors.
package reqctx

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
)

type requestIDKey struct{}
type traceIDKey struct{}

// WithRequestID stores the request id.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

// RequestID returns the request id, or "".
func RequestID(ctx context.Context) string {
	s, _ := ctx.Value(requestIDKey{}).(string)
	return s
}

// WithTraceID stores the trace id (32 lowercase hex).
func WithTraceID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, traceIDKey{}, id)
}

// TraceID returns the trace id, or "".
func TraceID(ctx context.Context) string {
	s, _ := ctx.Value(traceIDKey{}).(string)
	return s
}

// RequestIDOrNew returns the caller's request id when it may be echoed (1-64
// characters, no whitespace), else a new random one (16 hex). Every
// transport (gRPC interceptors, the pre-read refusals, the HTTP wire's
// route-less errors) decides this the same way.
func RequestIDOrNew(callerID string) string {
	if len(callerID) > 0 && len(callerID) <= 64 && !strings.ContainsAny(callerID, " \t\r\n") {
		return callerID
	}
	return randomHex(8)
}

// NewTraceID returns a random trace id (32 lowercase hex), for answers made
// where no span exists: the protocol wants a trace id on every error.
func NewTraceID() string { return randomHex(16) }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
