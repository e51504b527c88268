package events

import (
	"context"
	"sync"
	"time"
)

// Replay pacing: reading and sending events costs CPU here and in Redis, and
// a tenant that replays a long log on many streams at once (32 WatchEvents
// from START_POSITION_EARLIEST over 33k events took cyclesd to 140 % CPU for
// 28 s) must not slow down the other tenants' reserves. Every watch read is
// paced twice:
//
//   - by rate: the events it may return are paid for from two token buckets,
//     the stream's own and a shared one (its tenant's on this replica; for the
//     all-tenant feed, every feed stream's on this replica). A read is paid
//     for a full batch before it runs and what it did not return is given
//     back; a stream that overdraws either bucket waits until both are paid
//     back before it reads. A live stream at ordinary rates never waits.
//   - by concurrency: at most readSlots watch reads are in Redis at once on
//     this replica. Redis runs one script at a time, so without this bound
//     the reads of many streams queue in Redis together, however slowly each
//     stream reads, and a reserve queued behind them waits for all of them
//     (32 streams x a 256-event read took the other tenant's p99 from 30 ms
//     to 1.1 s and timed its reserves out). With it a reserve waits for at
//     most readSlots reads of ReadBatch events.
//
// One pacing type serves both kinds of stream: pacer, keyed by tenant for
// tenant streams and by allFeed for the all-tenant feed.
//
// Memory is bounded: a shared bucket exists only while a stream of its key is
// open on this replica (reference-counted like tails), so there are at most
// as many as open streams (-streams-total).

// The default rates are what one replica can give a catch-up without moving
// another tenant's reserve p99 past 2x + 10 ms on a loaded 2-core machine
// (test/abuse TestReplayDoesNotStarveOtherTenants): an event costs about
// 0.1 ms of CPU here to decode, convert and send, plus its share of a read
// script in Redis; at 4,000 events/s per tenant the other tenant's p99 went
// from 15 ms to 0.1-1 s, at 1,000 it stayed within the bound.
const (
	// DefaultStreamEventsPerSecond is a watch stream's read rate (events/s).
	DefaultStreamEventsPerSecond = 500
	// DefaultTenantEventsPerSecond is the read rate of all of a tenant's
	// watch streams together on one replica (events/s).
	DefaultTenantEventsPerSecond = 1000
	// DefaultFeedStreamEventsPerSecond is an all-tenant feed stream's read
	// rate (events/s).
	DefaultFeedStreamEventsPerSecond = 5000
	// DefaultFeedEventsPerSecond is the read rate of all the all-tenant feed
	// streams on one replica together (events/s).
	DefaultFeedEventsPerSecond = 5000
	// DefaultFeedBurstEvents is how far an all-tenant feed stream may read
	// ahead of its rates: one sweep's worth of expirations (the feed bench's
	// 100,000 over 1,000 tenants) reaches the operator as fast as it can be
	// read, where 5,000/s would add 20 s; a catch-up longer than that is
	// paced. The feed is an operator's (admin key only), not a tenant's, so
	// its burst is larger than a tenant stream's one read; the replica's
	// read slots still keep its reads from queueing reserves in Redis.
	DefaultFeedBurstEvents = 100_000
)

// readSlots is how many watch reads (tenant logs and the all-tenant feed)
// may be in Redis at once on one replica: a reserve waits behind at most
// this many.
const readSlots = 2

// allFeed is the pacer key of the all-tenant feed's shared bucket (no
// tenant id is empty).
const allFeed = ""

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

// readPaced is the paced read every watch makes (tenant streams, the
// all-tenant feed and its listing): it pays for n events from sp (waiting
// when over a rate), takes one of the replica's read slots, reads up to n
// entries of stream in [from, to], and gives back what the read did not
// return. It fails with ctx's error when ctx ends while it waits.
func (s *Service) readPaced(ctx context.Context, sp *streamPace, stream, from, to string, n int) (window, error) {
	if d := sp.charge(n); d > 0 {
		s.paced.Add(ctx, 1)
		if !wait(ctx, d) {
			sp.refund(n)
			return window{}, ctx.Err()
		}
	}
	select {
	case s.slots <- struct{}{}:
	case <-ctx.Done():
		sp.refund(n)
		return window{}, ctx.Err()
	}
	w, err := s.r.readStream(ctx, stream, from, to, n)
	<-s.slots
	sp.refund(n - len(w.Entries))
	return w, err
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
