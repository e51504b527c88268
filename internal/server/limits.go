package server

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/telemetry"
)

// ---- request size ----------------------------------------------------------

// runtimePrefix is the method prefix of the runtime RPCs, whose requests are
// small (the largest field is a 16 KiB metadata Struct).
const runtimePrefix = "/cycles.v1.RuntimeService/"

// sizeUnary refuses a runtime request over maxRuntimeRecv. grpc has already
// read it (bounded by the global -max-recv-msg-bytes); this keeps runtime
// requests to the documented size whatever the global bound is.
func (c *chain) sizeUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if c.maxRuntimeRecv > 0 && strings.HasPrefix(info.FullMethod, runtimePrefix) {
		if m, ok := req.(proto.Message); ok {
			if n := proto.Size(m); n > c.maxRuntimeRecv {
				// Too large is the request's fault and no retry fixes it:
				// INVALID_REQUEST (400 on the HTTP wire, as a body over the
				// listener's limit), not a throttle.
				return nil, apierr.Invalid("request", "is %d bytes; runtime requests are at most %d", n, c.maxRuntimeRecv).
					With("limit", "runtime_request_bytes")
			}
		}
	}
	return h(ctx, req)
}

// ---- concurrent streams ----------------------------------------------------

// streamLimiter bounds concurrent server streams per API key (the admin key
// counts as one key) and in all, so one tenant's watchers cannot take every
// stream slot, goroutine and store connection the process has.
type streamLimiter struct {
	perKey, total int
	refusals      metric.Int64Counter
	open          metric.Int64UpDownCounter

	mu    sync.Mutex
	n     int
	byKey map[string]int
}

func newStreamLimiter(perKey, total int, meter metric.Meter) *streamLimiter {
	open, err := meter.Int64UpDownCounter("cycles.rpc.streams.open", metric.WithDescription("Server streams open (all methods)"))
	if err != nil {
		panic(err)
	}
	return &streamLimiter{
		perKey: perKey, total: total, byKey: make(map[string]int), open: open,
		refusals: telemetry.MustCounter(meter, "cycles.rpc.streams.refused", "Streams refused by a concurrency limit (attribute limit)"),
	}
}

func streamOwner(ctx context.Context) string {
	p, _ := auth.FromContext(ctx)
	if p.Admin {
		return "admin"
	}
	return p.Tenant + "/" + p.KeyID
}

// acquire takes a slot for ctx's caller or returns LIMIT_EXCEEDED naming the
// limit that was hit.
func (l *streamLimiter) acquire(ctx context.Context) (func(), error) {
	key := streamOwner(ctx)
	l.mu.Lock()
	limit := ""
	switch {
	case l.n >= l.total:
		limit = "streams_total"
	case l.byKey[key] >= l.perKey:
		limit = "streams_per_key"
	}
	if limit != "" {
		l.mu.Unlock()
		l.refusals.Add(context.WithoutCancel(ctx), 1, metric.WithAttributes(attribute.String("limit", limit)))
		max := l.total
		if limit == "streams_per_key" {
			max = l.perKey
		}
		return nil, (&apierr.Error{
			Code:    apierr.LimitExceeded,
			Message: fmt.Sprintf("too many concurrent streams (%s: %d); close one and retry", limit, max),
		}).With("limit", limit)
	}
	l.n++
	l.byKey[key]++
	l.mu.Unlock()
	l.open.Add(context.WithoutCancel(ctx), 1)
	return func() {
		l.mu.Lock()
		l.n--
		if l.byKey[key]--; l.byKey[key] <= 0 {
			delete(l.byKey, key)
		}
		l.mu.Unlock()
		l.open.Add(context.WithoutCancel(ctx), -1)
	}, nil
}

func (c *chain) streamLimit(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if !info.IsServerStream && !info.IsClientStream {
		return h(srv, ss)
	}
	if accessOf(info.FullMethod).who == accessNone {
		// Health Watch and reflection: public, cheap, no store work; bounded
		// by the connection and per-connection stream limits.
		return h(srv, ss)
	}
	release, err := c.streams.acquire(ss.Context())
	if err != nil {
		return err
	}
	defer release()
	return h(srv, ss)
}
