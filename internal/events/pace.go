package events

import (
	"context"
	"sync"
	"time"
)

// Replay pacing: reading and sending events costs CPU here and in Redis, and
// a tenant that replays a long log on many streams at once (32 WatchEvents
// from START_POSITION_EARLIEST over 33k events took cyclesd to 140 % CPU for
// 28 s) must not slow down the other tenants' reserves. Every event a watch
// reads is paid for from two token buckets: the stream's own and its
// tenant's (shared by every stream of that tenant on this replica). A read is
// paid for a full batch before it runs, and what it did not return is given
// back; a stream that overdraws either bucket waits until both are paid back
// before it reads.
// A live stream at ordinary rates never waits; a catch-up proceeds at the
// configured rates.
//
// Memory is bounded: a tenant's bucket exists only while the tenant has an
// open stream on this replica (reference-counted like tails), so there are at
// most as many as open streams (-streams-total).

const (
	// DefaultStreamEventsPerSecond is a watch stream's read rate (events/s).
	DefaultStreamEventsPerSecond = 2000
	// DefaultTenantEventsPerSecond is the read rate of all of a tenant's
	// watch streams together on one replica (events/s).
	DefaultTenantEventsPerSecond = 4000
)

// bucket is a token bucket that may go into debt: take charges n tokens at
// once and says how long to wait until the balance is back at zero. Not
// safe for concurrent use (callers hold a lock).
type bucket struct {
	rate   float64 // tokens per second
	burst  float64
	tokens float64
	last   time.Time
}

func newBucket(rate float64, burst float64, now time.Time) bucket {
	return bucket{rate: rate, burst: burst, tokens: burst, last: now}
}

func (b *bucket) take(n int, now time.Time) time.Duration {
	if b.rate <= 0 {
		return 0 // unlimited
	}
	if el := now.Sub(b.last).Seconds(); el > 0 {
		b.tokens = min(b.burst, b.tokens+el*b.rate)
		b.last = now
	}
	b.tokens -= float64(n)
	if b.tokens >= 0 {
		return 0
	}
	return time.Duration(-b.tokens / b.rate * float64(time.Second))
}

// give returns n tokens (up to the burst).
func (b *bucket) give(n int) {
	if b.rate > 0 {
		b.tokens = min(b.burst, b.tokens+float64(n))
	}
}

// pacer holds the tenant buckets of the open streams.
type pacer struct {
	streamRate, tenantRate float64
	burst                  float64
	now                    func() time.Time

	mu      sync.Mutex
	tenants map[string]*tenantBucket
}

type tenantBucket struct {
	refs int
	b    bucket
}

// newPacer paces streams at streamRate and tenants at tenantRate events/s
// (0 or less: unlimited), each bucket holding up to burst events.
func newPacer(streamRate, tenantRate float64, burst int, now func() time.Time) *pacer {
	return &pacer{streamRate: streamRate, tenantRate: tenantRate, burst: float64(burst), now: now,
		tenants: map[string]*tenantBucket{}}
}

// streamPace is one stream's view: its own bucket and its tenant's.
type streamPace struct {
	p      *pacer
	tenant string
	tb     *tenantBucket
	own    bucket
}

// open registers a stream of tenant; close it when the stream ends.
func (p *pacer) open(tenant string) *streamPace {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	tb, ok := p.tenants[tenant]
	if !ok {
		tb = &tenantBucket{b: newBucket(p.tenantRate, 2*p.burst, now)}
		p.tenants[tenant] = tb
	}
	tb.refs++
	return &streamPace{p: p, tenant: tenant, tb: tb, own: newBucket(p.streamRate, p.burst, now)}
}

func (s *streamPace) close() {
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if s.tb.refs--; s.tb.refs == 0 {
		delete(p.tenants, s.tenant)
	}
}

// charge pays for n events read and returns how long the stream must wait
// before its next read.
func (s *streamPace) charge(n int) time.Duration {
	if n == 0 {
		return 0
	}
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	return max(s.own.take(n, now), s.tb.b.take(n, now))
}

// refund gives back n events paid for but not read.
func (s *streamPace) refund(n int) {
	if n <= 0 {
		return
	}
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	s.own.give(n)
	s.tb.b.give(n)
}

// wait sleeps for d unless ctx ends first (false then).
func wait(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
