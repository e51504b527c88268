package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc/tap"

	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/telemetry"
)

// Public streams (docs/limits.md, "Public methods"). Health, reflection and
// the action-kind registry need no credentials, so the pre-auth tap cannot
// refuse them, and grpc-go reads a request message whole (up to -max-recv-msg-bytes, allocated when
// its length prefix arrives) before any interceptor runs; grpc-go has no
// per-method receive cap. What bounds a stranger's public streams is
// therefore decided in the tap, from the connection and the counts:
//
//   - streams still waiting for their request message: PublicAwaitingPerConn
//     per connection (refused past it) and PublicAwaitingTotal in all (past
//     it the longest-waiting one is cancelled to make room). A health or
//     reflection request arrives in microseconds, so these only bind on
//     stalled bodies; they cap what stalled public bodies can hold at
//     PublicAwaitingTotal x -max-recv-msg-bytes;
//   - each request message must arrive within PublicRecvTimeout of the
//     stream's start (for reflection's bidirectional stream: of the previous
//     message); past it the stream is cancelled and its buffer freed;
//   - public streams open (Health/Watch lives long): PublicStreamsPerConn per
//     connection and PublicStreamsTotal in all.
//
// A refusal is RESOURCE_EXHAUSTED with ErrorInfo (reason LIMIT_EXCEEDED,
// metadata limit) and a retry delay, counted in cycles.rpc.preauth_refusals
// with reason public_streams; each refused stream also counts against its
// connection (connguard.go: refused_streams).

// publicGuard holds the process-wide public stream counts.
type publicGuard struct {
	lim          Limits
	open         atomic.Int32
	recvTimeouts metric.Int64Counter

	// waiting are the streams still waiting for their request message, with
	// when they started (at most PublicAwaitingTotal).
	mu      sync.Mutex
	waiting map[*publicStream]time.Time
}

func newPublicGuard(lim Limits, meter metric.Meter) *publicGuard {
	return &publicGuard{lim: lim, waiting: make(map[*publicStream]time.Time),
		recvTimeouts: telemetry.MustCounter(meter, "cycles.rpc.public_recv_timeouts",
			"Public (health, reflection) streams cancelled while waiting for their request message (attribute cause: deadline, evicted)")}
}

var (
	errPublicRecvTimeout = errors.New("request message not received in time")
	errPublicEvicted     = errors.New("request message not received; the slot went to a newer stream")
)

// publicStream is one admitted public stream.
type publicStream struct {
	g         *publicGuard
	gc        *guardedConn
	bidi      bool
	cancel    context.CancelCauseFunc
	mu        sync.Mutex
	timer     *time.Timer
	releasedA sync.Once
}

type publicKey struct{}

func publicStreamOf(ctx context.Context) *publicStream {
	ps, _ := ctx.Value(publicKey{}).(*publicStream)
	return ps
}

// admit takes a public stream slot on gc or returns the refusal naming the
// limit.
func (g *publicGuard) admit(ctx context.Context, gc *guardedConn, method string) (context.Context, string, error) {
	// Take the slots first, then check: concurrent taps on other
	// connections cannot overshoot a total.
	pc, tot, ac := gc.public.Add(1), g.open.Add(1), gc.awaiting.Add(1)
	limit, max := "", 0
	switch {
	case int(pc) > g.lim.PublicStreamsPerConn:
		limit, max = "public_streams_per_conn", g.lim.PublicStreamsPerConn
	case int(tot) > g.lim.PublicStreamsTotal:
		limit, max = "public_streams_total", g.lim.PublicStreamsTotal
	case int(ac) > g.lim.PublicAwaitingPerConn:
		limit, max = "public_awaiting_per_conn", g.lim.PublicAwaitingPerConn
	}
	if limit != "" {
		gc.public.Add(-1)
		g.open.Add(-1)
		gc.awaiting.Add(-1)
		return ctx, limit, &apierr.Error{
			Code:       apierr.LimitExceeded,
			Message:    fmt.Sprintf("too many concurrent public streams (%s: %d); retry shortly", limit, max),
			Details:    map[string]string{"limit": limit},
			RetryAfter: time.Second,
		}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	ps := &publicStream{g: g, gc: gc, cancel: cancel, bidi: strings.HasPrefix(method, "/grpc.reflection.")}
	ps.timer = time.AfterFunc(g.lim.PublicRecvTimeout, func() {
		g.recvTimeouts.Add(context.Background(), 1, metric.WithAttributes(attribute.String("cause", "deadline")))
		cancel(errPublicRecvTimeout)
	})
	// At PublicAwaitingTotal the stream that has waited longest for its
	// message gives its slot to this one: an honest request arrives within
	// microseconds of its headers, so the oldest waiter is a stalled body,
	// and a stranger holding every slot cannot lock health checks out.
	g.mu.Lock()
	var evict *publicStream
	if len(g.waiting) >= g.lim.PublicAwaitingTotal {
		var oldest time.Time
		for w, at := range g.waiting {
			if evict == nil || at.Before(oldest) {
				evict, oldest = w, at
			}
		}
	}
	g.waiting[ps] = time.Now()
	g.mu.Unlock()
	if evict != nil {
		evict.releaseAwaiting()
		g.recvTimeouts.Add(context.Background(), 1, metric.WithAttributes(attribute.String("cause", "evicted")))
		evict.cancel(errPublicEvicted)
	}
	ctx = context.WithValue(ctx, publicKey{}, ps)
	context.AfterFunc(ctx, func() {
		ps.mu.Lock()
		ps.timer.Stop()
		ps.mu.Unlock()
		ps.releaseAwaiting()
		gc.public.Add(-1)
		g.open.Add(-1)
		cancel(nil)
	})
	return ctx, "", nil
}

func (ps *publicStream) releaseAwaiting() {
	ps.releasedA.Do(func() {
		ps.gc.awaiting.Add(-1)
		ps.g.mu.Lock()
		delete(ps.g.waiting, ps)
		ps.g.mu.Unlock()
	})
}

// received is called when a request message has arrived: the stream no
// longer waits for a body; a bidirectional one gets a fresh deadline for
// its next message.
func (ps *publicStream) received() {
	ps.releaseAwaiting()
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.bidi {
		ps.timer.Reset(ps.g.lim.PublicRecvTimeout)
		return
	}
	ps.timer.Stop()
}

// streamGate is the grpc tap: public streams go through the public guard,
// the rest through pre-auth (preauth.go); both count on the connection.
type streamGate struct {
	authn  *authenticator
	public *publicGuard
}

func (s *streamGate) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	gc := connOf(ctx)
	if gc == nil {
		return s.authn.tap(ctx, info)
	}
	if gc.condemned() {
		if r := s.authn.preauthRefusals; r != nil {
			r.Add(context.WithoutCancel(ctx), 1, condemnedRefusal)
		}
		return ctx, condemnedErr
	}
	var err error
	if accessOf(info.FullMethodName).who == accessNone {
		var limit string
		var refusal error
		ctx, limit, refusal = s.public.admit(ctx, gc, info.FullMethodName)
		if limit != "" {
			err = s.authn.refuse(ctx, "public_streams", refusal)
		}
	} else {
		ctx, err = s.authn.tap(ctx, info)
	}
	if err != nil {
		gc.streamRefused()
		return ctx, err
	}
	gc.streamStarted()
	context.AfterFunc(ctx, gc.streamEnded)
	return ctx, nil
}
