package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cyclesgo/cycles-go/pkg/apierr"
	"github.com/cyclesgo/cycles-go/pkg/auth"
	"github.com/cyclesgo/cycles-go/pkg/reqctx"
	"github.com/cyclesgo/cycles-go/pkg/validate"
)

// newRequestID returns 16 random hex characters.
func newRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// withRequestID takes x-request-id from the caller (when sane) or makes one,
// stores it in ctx and echoes it in the response header.
func withRequestID(ctx context.Context) context.Context {
	id := auth.FirstMetadata(ctx, auth.RequestIDHeader)
	if len(id) == 0 || len(id) > 64 || strings.ContainsAny(id, " \t\r\n") {
		id = newRequestID()
	}
	_ = grpc.SetHeader(ctx, metadata.Pairs(auth.RequestIDHeader, id))
	ctx = reqctx.WithRequestID(ctx, id)
	// The trace id of the RPC's span (the otelgrpc stats handler honours an
	// incoming W3C traceparent); a random one when tracing is off, because
	// the protocol requires every error and event to carry one.
	traceID := ""
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		traceID = sc.TraceID().String()
	} else {
		var b [16]byte
		_, _ = rand.Read(b[:])
		traceID = hex.EncodeToString(b[:])
	}
	return reqctx.WithTraceID(ctx, traceID)
}

// toStatus converts any handler error into the gRPC error a client sees:
// *apierr.Error with its ErrorInfo; deadline → UNAVAILABLE (fail closed);
// anything unexpected → INTERNAL (details only in the log).
func toStatus(ctx context.Context, log *zap.Logger, method string, err error) error {
	if err == nil {
		return nil
	}
	reqID, traceID := reqctx.RequestID(ctx), reqctx.TraceID(ctx)
	if ae, ok := apierr.As(err); ok {
		return ae.Status(reqID, traceID).Err()
	}
	if _, ok := status.FromError(err); ok && status.Code(err) != codes.Unknown {
		return err
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return (&apierr.Error{Code: apierr.Unavailable, Message: "budget store did not answer in time"}).Status(reqID, traceID).Err()
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "request canceled")
	}
	log.Error("internal error", zap.String("method", method), zap.String("request_id", reqID), zap.Error(err))
	return (&apierr.Error{Code: apierr.InternalError, Message: "internal error"}).Status(reqID, traceID).Err()
}

// chain is the interceptor chain, built in one place. Order (outermost first):
// request id → log → status mapping → panic recovery → deadline → auth →
// rate-limit guard → validation → handler.
type chain struct {
	log            *zap.Logger
	authn          *authenticator
	guard          grpc.UnaryServerInterceptor
	requestTimeout time.Duration
	panics         metric.Int64Counter
}

func (c *chain) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	start := time.Now()
	ctx = withRequestID(ctx)
	defer func() {
		if r := recover(); r != nil {
			c.panics.Add(context.Background(), 1)
			c.log.Error("panic in handler", zap.String("method", info.FullMethod), zap.Any("panic", r), zap.Stack("stack"))
			err = apierr.New(apierr.InternalError, "internal error")
		}
		err = toStatus(ctx, c.log, info.FullMethod, err)
		c.logRPC(ctx, info.FullMethod, start, err)
	}()
	if c.requestTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.requestTimeout)
		defer cancel()
	}
	ctx, err = c.authn.authenticate(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	validated := func(ctx context.Context, req any) (any, error) {
		if err := validateMessage(req); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
	if c.guard != nil {
		// The guard runs before validation so a flood of malformed requests
		// is throttled too.
		return c.guard(ctx, req, info, validated)
	}
	return validated(ctx, req)
}

func (c *chain) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	start := time.Now()
	ctx := withRequestID(ss.Context())
	defer func() {
		if r := recover(); r != nil {
			c.panics.Add(context.Background(), 1)
			c.log.Error("panic in stream handler", zap.String("method", info.FullMethod), zap.Any("panic", r), zap.Stack("stack"))
			err = apierr.New(apierr.InternalError, "internal error")
		}
		err = toStatus(ctx, c.log, info.FullMethod, err)
		c.logRPC(ctx, info.FullMethod, start, err)
	}()
	ctx, err = c.authn.authenticate(ctx, info.FullMethod)
	if err != nil {
		return err
	}
	return handler(srv, &validatingStream{ServerStream: ss, ctx: ctx})
}

// validatingStream validates every received message and carries the
// authenticated context.
type validatingStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *validatingStream) Context() context.Context { return s.ctx }

func (s *validatingStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return validateMessage(m)
}

// validateMessage runs the one validation path on cycles.v1 messages; other
// packages (health, reflection, Envoy RLS) validate themselves.
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

func (c *chain) logRPC(ctx context.Context, method string, start time.Time, err error) {
	code := status.Code(err)
	fields := []zap.Field{
		zap.String("method", method),
		zap.String("code", code.String()),
		zap.Duration("latency", time.Since(start)),
		zap.String("request_id", reqctx.RequestID(ctx)),
		zap.String("trace_id", reqctx.TraceID(ctx)),
	}
	if p, ok := auth.FromContext(ctx); ok && p.Tenant != "" {
		fields = append(fields, zap.String("tenant", p.Tenant))
	}
	if reason, _, ok := apierr.FromStatus(err); ok {
		fields = append(fields, zap.String("reason", string(reason)))
	}
	switch code {
	case codes.OK:
		c.log.Debug("rpc", fields...)
	case codes.Internal, codes.Unknown, codes.DataLoss:
		c.log.Error("rpc", fields...)
	case codes.Unavailable:
		c.log.Warn("rpc", fields...)
	default:
		c.log.Info("rpc", fields...)
	}
}
