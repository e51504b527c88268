package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/reqctx"
	"github.com/cyclesgo/cycles-go/internal/validate"
)

// chain is the interceptor chain, built in one place (unary and stream alike).
// Order, outermost first:
//
//	request id  → ids into ctx, response header and log fields
//	logging     → one line per finished RPC (successes at debug, see levelFor): method, code, latency, tenant, request id
//	status      → *apierr.Error / deadline / unknown errors → gRPC status + ErrorInfo
//	recovery    → a panic becomes INTERNAL, is counted, the process lives
//	deadline    → the Redis work of one unary RPC is bounded (fail fast, fail closed)
//	auth        → the caller's principal (tenant key or admin key); the
//	              pre-auth tap (preauth.go) already refused what it could
//	              before the body was read
//	audit       → an audited call (internal/audit) carries its audit entry
//	              in ctx; a refusal from here on is recorded (optional)
//	limits      → runtime request size; concurrent streams per key and in all
//	guard       → per-API-key rate limit (optional)
//	validation  → the one validation path (internal/validate)
//	scope       → an API key's scope_filter (scopecheck.go)
//	inner       → the services' own interceptors (Options.Inner; unary only)
//
// Request bodies and keys are never logged.
type chain struct {
	log            *zap.Logger
	authn          *authenticator
	guard          grpc.UnaryServerInterceptor
	inner          []grpc.UnaryServerInterceptor
	requestTimeout time.Duration
	panics         metric.Int64Counter
	maxRuntimeRecv int
	streams        *streamLimiter
	storeFull      metric.Int64Counter
	audit          Auditor

	// logUnary is the middleware's logging interceptor; logReplay is the
	// same with the start time and duration taken from the context (see
	// loggingUnary).
	logUnary, logReplay grpc.UnaryServerInterceptor
}

func (c *chain) unaryInterceptors() []grpc.UnaryServerInterceptor {
	c.logUnary = logging.UnaryServerInterceptor(zapLogger(c.log), c.loggingOptions()...)
	c.logReplay = logging.UnaryServerInterceptor(zapLogger(c.log),
		append(c.loggingOptions(), logging.WithFieldsFromContext(replayedTiming))...)
	list := []grpc.UnaryServerInterceptor{
		c.requestIDUnary,
		c.loggingUnary,
		c.statusUnary,
		recovery.UnaryServerInterceptor(recovery.WithRecoveryHandlerContext(c.onPanic)),
		c.deadlineUnary,
		c.authUnary,
	}
	if c.audit != nil {
		list = append(list, c.audit.Intercept)
	}
	list = append(list, c.sizeUnary)
	if c.guard != nil {
		list = append(list, c.guard)
	}
	list = append(list, validateUnary, scopeUnary, onBehalfUnary)
	return append(list, c.inner...)
}

func (c *chain) streamInterceptors() []grpc.StreamServerInterceptor {
	return []grpc.StreamServerInterceptor{
		c.requestIDStream,
		logging.StreamServerInterceptor(zapLogger(c.log), c.loggingOptions()...),
		c.statusStream,
		recovery.StreamServerInterceptor(recovery.WithRecoveryHandlerContext(c.onPanic)),
		c.authStream,
		c.streamLimit,
		checkEachRecv(func(_ context.Context, m any) error { return validateMessage(m) }),
		checkEachRecv(scopeDenied),
	}
}

// ---- request id ------------------------------------------------------------

// TraceIDHeader carries the call's trace id back to the caller (the Cycles
// protocol's X-Cycles-Trace-Id).
const TraceIDHeader = "x-cycles-trace-id"

// withRequestID takes x-request-id from the caller (when sane) or makes one,
// echoes it in the response header, and stores it and the trace id in ctx and
// in the log fields.
func withRequestID(ctx context.Context) context.Context {
	id := reqctx.RequestIDOrNew(auth.FirstMetadata(ctx, auth.RequestIDHeader))
	// The trace id of the RPC's span (the otelgrpc stats handler honours an
	// incoming W3C traceparent); a random one when tracing is off, because
	// the protocol requires every error and event to carry one.
	var traceID string
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		traceID = sc.TraceID().String()
	} else {
		traceID = reqctx.NewTraceID()
	}
	_ = grpc.SetHeader(ctx, metadata.Pairs(auth.RequestIDHeader, id, TraceIDHeader, traceID))
	ctx = reqctx.WithTraceID(reqctx.WithRequestID(ctx, id), traceID)
	return logging.InjectFields(ctx, logging.Fields{"request_id", id, "trace_id", traceID})
}

func (c *chain) requestIDUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	return h(withRequestID(ctx), req)
}

func (c *chain) requestIDStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	return h(srv, &contextStream{ServerStream: ss, ctx: withRequestID(ss.Context())})
}

// ---- logging ---------------------------------------------------------------

// loggingUnary writes the one line per RPC through go-grpc-middleware's
// logging interceptor, without paying for it when the line is not written.
// The level depends on the code (OK is debug), so the middleware prepares
// its fields for every call and drops most of them; that was a tenth of
// cyclesd's CPU on the reserve path. With debug disabled, the RPC runs
// without the middleware and, only if its code's level is enabled (every
// error, at the default info level), the outcome is replayed through it with
// the real start time and duration, giving the same line.
func (c *chain) loggingUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	core := c.log.Core()
	if core.Enabled(zapcore.DebugLevel) {
		return c.logUnary(ctx, req, info, h)
	}
	start := time.Now()
	resp, err := h(ctx, req)
	if err == nil || !core.Enabled(zapLevel(levelFor(status.Code(err)))) {
		return resp, err
	}
	rctx := context.WithValue(ctx, replayKey{}, replay{start: start, took: time.Since(start)})
	return c.logReplay(rctx, req, info, func(context.Context, any) (any, error) { return resp, err })
}

type replayKey struct{}

type replay struct {
	start time.Time
	took  time.Duration
}

// replayedTiming overrides the middleware's grpc.start_time and grpc.time_ms
// (fields from the context take precedence) on a replayed outcome, with the
// values and formats the middleware itself would have used.
func replayedTiming(ctx context.Context) logging.Fields {
	r, ok := ctx.Value(replayKey{}).(replay)
	if !ok {
		return nil
	}
	return logging.Fields{
		"grpc.start_time", r.start.Format(time.RFC3339),
		"grpc.time_ms", fmt.Sprintf("%v", float32(r.took.Nanoseconds()/1000)/1000),
	}
}

// levelFor is the log level of an RPC's line by its code. CANCELED is the
// client's own doing (it hung up a WatchEvents stream, or gave up on a call):
// not a failed call, so it is logged like a success, at debug. A cancel by
// cyclesd itself (shutdown) reaches the client as UNAVAILABLE.
func levelFor(code codes.Code) logging.Level {
	switch code {
	case codes.OK, codes.Canceled:
		return logging.LevelDebug
	case codes.Internal, codes.Unknown, codes.DataLoss:
		return logging.LevelError
	case codes.Unavailable:
		return logging.LevelWarn
	default:
		return logging.LevelInfo
	}
}

func zapLevel(l logging.Level) zapcore.Level {
	switch l {
	case logging.LevelDebug:
		return zapcore.DebugLevel
	case logging.LevelInfo:
		return zapcore.InfoLevel
	case logging.LevelWarn:
		return zapcore.WarnLevel
	default:
		return zapcore.ErrorLevel
	}
}

func (c *chain) loggingOptions() []logging.Option {
	return []logging.Option{
		logging.WithLogOnEvents(logging.FinishCall),
		logging.WithLevels(levelFor),
		logging.WithErrorFields(func(err error) logging.Fields {
			if reason, _, ok := apierr.FromStatus(err); ok {
				return logging.Fields{"reason", string(reason)}
			}
			return nil
		}),
	}
}

// zapLogger adapts zap to the middleware's logger interface. A line below
// the logger's level costs nothing (no field conversion).
func zapLogger(l *zap.Logger) logging.Logger {
	return logging.LoggerFunc(func(_ context.Context, lvl logging.Level, msg string, fields ...any) {
		if !l.Core().Enabled(zapLevel(lvl)) {
			return
		}
		zf := make([]zap.Field, 0, len(fields)/2)
		for i := 0; i+1 < len(fields); i += 2 {
			zf = append(zf, zap.Any(fmt.Sprint(fields[i]), fields[i+1]))
		}
		switch lvl {
		case logging.LevelDebug:
			l.Debug(msg, zf...)
		case logging.LevelInfo:
			l.Info(msg, zf...)
		case logging.LevelWarn:
			l.Warn(msg, zf...)
		default:
			l.Error(msg, zf...)
		}
	})
}

// ---- status mapping --------------------------------------------------------

// toStatus converts any handler error into the gRPC error a client sees:
// *apierr.Error with its ErrorInfo; deadline → UNAVAILABLE (fail closed);
// anything unexpected → INTERNAL (details only in the log).
func toStatus(ctx context.Context, log *zap.Logger, err error) error {
	if err == nil {
		return nil
	}
	reqID, traceID := reqctx.RequestID(ctx), reqctx.TraceID(ctx)
	if ae, ok := apierr.As(err); ok {
		if ae.Cause != nil {
			// The client gets the fixed message; the cause (which can
			// name internal addresses) stays here.
			log.Warn("request failed", zap.String("request_id", reqID), zap.String("reason", string(ae.Code)), zap.Error(ae.Cause))
		}
		return ae.Status(reqID, traceID).Err()
	}
	if st, ok := status.FromError(err); ok && st.Code() != codes.Unknown {
		if st.Code() == codes.Internal {
			// recovery's panic status: keep the ErrorInfo shape.
			return (&apierr.Error{Code: apierr.InternalError, Message: "internal error"}).Status(reqID, traceID).Err()
		}
		return err
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return (&apierr.Error{Code: apierr.Unavailable, Message: "budget store did not answer in time"}).Status(reqID, traceID).Err()
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "request canceled")
	}
	log.Error("internal error", zap.String("request_id", reqID), zap.Error(err))
	return (&apierr.Error{Code: apierr.InternalError, Message: "internal error"}).Status(reqID, traceID).Err()
}

func (c *chain) statusUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	resp, err := h(ctx, req)
	c.countStoreFull(ctx, err)
	return resp, toStatus(ctx, c.log, err)
}

func (c *chain) statusStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	err := h(srv, ss)
	c.countStoreFull(ss.Context(), err)
	return toStatus(ss.Context(), c.log, err)
}

// countStoreFull counts RPCs refused because Redis is full (the health
// probe logs the state and what to do; each RPC's line has reason STORE_FULL).
func (c *chain) countStoreFull(ctx context.Context, err error) {
	if err != nil && c.storeFull != nil && apierr.HasCode(err, apierr.StoreFull) {
		c.storeFull.Add(context.WithoutCancel(ctx), 1)
	}
}

// ---- recovery --------------------------------------------------------------

func (c *chain) onPanic(ctx context.Context, p any) error {
	c.panics.Add(context.Background(), 1)
	c.log.Error("panic in handler", zap.String("request_id", reqctx.RequestID(ctx)), zap.Any("panic", p), zap.Stack("stack"))
	return apierr.New(apierr.InternalError, "internal error")
}

// ---- deadline --------------------------------------------------------------

func (c *chain) deadlineUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if c.requestTimeout <= 0 {
		return h(ctx, req)
	}
	ctx, cancel := context.WithTimeout(ctx, c.requestTimeout)
	defer cancel()
	return h(ctx, req)
}

// ---- auth ------------------------------------------------------------------

func (c *chain) authUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	ctx, err := c.authn.authenticate(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	addTenantField(ctx)
	return h(ctx, req)
}

func (c *chain) authStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	ctx, err := c.authn.authenticate(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	addTenantField(ctx)
	return h(srv, &contextStream{ServerStream: ss, ctx: ctx})
}

// addTenantField puts the caller's tenant on the RPC's log line.
func addTenantField(ctx context.Context) {
	if p, ok := auth.FromContext(ctx); ok && p.Tenant != "" {
		logging.AddFields(ctx, logging.Fields{"tenant", p.Tenant})
	}
}

// ---- validation ------------------------------------------------------------

func validateUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := validateMessage(req); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

// checkEachRecv is a stream interceptor that runs check on every message
// the client sends, once grpc-go has decoded it: the stream form of a unary
// check (validation, the scope filter).
func checkEachRecv(check func(ctx context.Context, m any) error) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		return h(srv, &checkedStream{ServerStream: ss, check: check})
	}
}

// checkedStream checks every received message.
type checkedStream struct {
	grpc.ServerStream
	check func(ctx context.Context, m any) error
}

func (s *checkedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		// grpc-go has already written the final status of a receive
		// error (its serverStream.RecvMsg does, e.g. for a message over
		// -max-recv-msg-bytes): mapping it here would change nothing
		// the client sees (docs/limits.md).
		return err
	}
	return s.check(s.Context(), m)
}

func validateMessage(m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil
	}
	if !strings.HasPrefix(string(pm.ProtoReflect().Descriptor().FullName()), "cycles.v1.") {
		return nil
	}
	return validate.Message(pm)
}

// contextStream carries a derived context on a server stream.
type contextStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *contextStream) Context() context.Context { return s.ctx }
