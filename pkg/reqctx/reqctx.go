// Package reqctx carries per-request identifiers (request id, trace id)
// through a context, from the interceptors down to event emission and errors.
package reqctx

import "context"

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
