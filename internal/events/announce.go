package events

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/cyclesgo/cycles-go/internal/defaults"
	"github.com/cyclesgo/cycles-go/internal/eventctx"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/script"
	"github.com/cyclesgo/cycles-go/internal/telemetry"
)

// scriptAnnounce updates the all-tenant feed (lua/events/announce.lua).
var scriptAnnounce = script.Bind[announceKeys, announceArgs]("events/announce")

type announceKeys struct {
	Log   string `lua:"feed_log"`
	Marks string `lua:"feed_marks"`
}

type announceArgs struct {
	RetentionMs int64    `lua:"retention_ms"`
	Pairs       []string `lua:"tenant_event_pairs"` // tenant id, stream id, ...
}

// maxAnnouncePairs bounds one announce script call (lua/events/announce.lua).
const maxAnnouncePairs = 500

// Announcer puts "tenant T has events up to id X" into the all-tenant feed
// (doc.go, "The all-tenant feed"). It learns X from the executor's event hook
// after every script run that appended events (Observe) and from the
// sweeper's reconciliation (Reconcile), keeps at most one pending id per
// tenant, and flushes them all in one script call per round. Nothing it holds
// is needed for correctness: a lost announcement (crash before a flush) only
// delays the tenant's events until its next announcement or reconciliation.
type Announcer struct {
	exec      *script.Executor
	retention time.Duration
	log       *zap.Logger

	mu      sync.Mutex
	pending map[string]ID // tenant -> newest id not yet in the feed
	// known is the newest mark this process has seen in the feed per tenant;
	// Reconcile drops what it already covers. It holds one id per tenant
	// this process announced or reconciled (bounded by the tenant count).
	known map[string]ID
	// unsure are tenants whose script call got no reply: it may have
	// appended events. Their log's newest id is read once the call can no
	// longer be running (unsureDelay) and announced.
	unsure map[string]time.Time
	signal chan struct{}

	announced metric.Int64Counter
	flushErrs metric.Int64Counter
}

// AnnouncerOptions configure an Announcer.
type AnnouncerOptions struct {
	// Retention trims the feed; it must equal the event retention.
	Retention     time.Duration
	MeterProvider metric.MeterProvider
	Logger        *zap.Logger
}

// NewAnnouncer builds an Announcer; Run flushes it.
func NewAnnouncer(exec *script.Executor, opts AnnouncerOptions) *Announcer {
	defaults.Set(&opts.Retention, eventctx.DefaultRetention)
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	m := telemetry.Meter(opts.MeterProvider, "events")
	return &Announcer{
		exec: exec, retention: opts.Retention, log: log,
		pending: map[string]ID{}, known: map[string]ID{}, unsure: map[string]time.Time{}, signal: make(chan struct{}, 1),
		announced: telemetry.MustCounter(m, "cycles.events.feed.announced", "Ranges appended to the all-tenant feed by this process"),
		flushErrs: telemetry.MustCounter(m, "cycles.events.feed.flush_errors", "Failed all-tenant feed flushes (retried)"),
	}
}

// unsureDelay is how long after a call without reply its tenant's log is
// read: longer than any script runs, so the read sees what it appended.
const unsureDelay = time.Second

// Hook is the executor event hook (script.Executor.SetEventHook): stream is
// a tenant's event stream key, lastID the newest event the run appended, or
// "" when the call got no reply and may or may not have appended.
func (a *Announcer) Hook(stream, lastID string) {
	tenant, ok := keys.TenantOfEvents(stream)
	if !ok {
		return
	}
	if lastID == "" {
		a.mu.Lock()
		if _, ok := a.unsure[tenant]; !ok {
			a.unsure[tenant] = time.Now().Add(unsureDelay)
		}
		a.mu.Unlock()
		return
	}
	a.Observe(tenant, lastID)
}

// checkUnsure reads the newest id of every tenant whose unsure delay has
// passed and announces it; failures stay for the next round.
func (a *Announcer) checkUnsure(ctx context.Context) {
	now := time.Now()
	var due []string
	a.mu.Lock()
	for t, at := range a.unsure {
		if !now.Before(at) {
			due = append(due, t)
		}
	}
	a.mu.Unlock()
	r := reader{exec: a.exec}
	for _, t := range due {
		w, err := r.read(ctx, t, "+", "+", 1)
		if err != nil {
			a.log.Debug("reading an unsure tenant's log failed (retried)", zap.String("tenant", t), zap.Error(err))
			continue
		}
		a.mu.Lock()
		delete(a.unsure, t)
		a.mu.Unlock()
		if w.Last != "" {
			a.Reconcile(t, w.Last)
		}
	}
}

// Observe records that tenant's log holds events up to lastID.
func (a *Announcer) Observe(tenant, lastID string) {
	id, err := ParseID(lastID)
	if err != nil {
		return
	}
	a.mu.Lock()
	if p, ok := a.pending[tenant]; !ok || p.Less(id) {
		a.pending[tenant] = id
	}
	a.mu.Unlock()
	select {
	case a.signal <- struct{}{}:
	default:
	}
}

// Reconcile is the sweeper's report of a tenant's newest event id: announced
// only if this process has not seen the feed cover it, so an idle tenant
// costs nothing after the first report.
func (a *Announcer) Reconcile(tenant, tail string) {
	id, err := ParseID(tail)
	if err != nil {
		return
	}
	a.mu.Lock()
	k, ok := a.known[tenant]
	a.mu.Unlock()
	if ok && !k.Less(id) {
		return
	}
	a.Observe(tenant, tail)
}

// Run flushes pending announcements as they come until ctx ends, then makes
// one last flush (bounded by a few seconds) so a clean stop loses nothing.
func (a *Announcer) Run(ctx context.Context) error {
	backoff := 50 * time.Millisecond
	tick := time.NewTicker(unsureDelay / 2)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
			err := a.Flush(fctx)
			cancel()
			if err != nil {
				a.log.Warn("final feed flush failed (the sweeper's reconciliation repairs it)", zap.Error(err))
			}
			return nil
		case <-tick.C:
			a.checkUnsure(ctx)
			continue
		case <-a.signal:
		}
		if err := a.Flush(ctx); err != nil {
			if ctx.Err() != nil {
				continue
			}
			a.log.Warn("feed flush failed (retrying)", zap.Error(err), zap.Duration("backoff", backoff))
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			if backoff < 2*time.Second {
				backoff *= 2
			}
			select {
			case a.signal <- struct{}{}:
			default:
			}
			continue
		}
		backoff = 50 * time.Millisecond
	}
}

// Flush appends every pending announcement to the feed now. On failure the
// unsent ones stay pending.
func (a *Announcer) Flush(ctx context.Context) error {
	a.mu.Lock()
	batch := a.pending
	a.pending = map[string]ID{}
	a.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	tenants := make([]string, 0, len(batch))
	for t := range batch {
		tenants = append(tenants, t)
	}
	for start := 0; start < len(tenants); start += maxAnnouncePairs {
		end := min(start+maxAnnouncePairs, len(tenants))
		part := tenants[start:end]
		if err := a.append(ctx, part, batch); err != nil {
			a.flushErrs.Add(ctx, 1)
			a.mu.Lock()
			for _, t := range tenants[start:] {
				if p, ok := a.pending[t]; !ok || p.Less(batch[t]) {
					a.pending[t] = batch[t]
				}
			}
			a.mu.Unlock()
			return err
		}
	}
	return nil
}

func (a *Announcer) append(ctx context.Context, tenants []string, ids map[string]ID) error {
	pairs := make([]string, 0, 2*len(tenants))
	for _, t := range tenants {
		pairs = append(pairs, t, ids[t].String())
	}
	var res struct {
		Appended int64                   `json:"appended"`
		Marks    script.LuaArray[string] `json:"marks"`
	}
	if err := scriptAnnounce.RunInto(ctx, a.exec, &res, announceKeys{keys.Feed, keys.FeedMarks},
		announceArgs{RetentionMs: a.retention.Milliseconds(), Pairs: pairs}); err != nil {
		return fmt.Errorf("announce %d tenants to the event feed: %w", len(tenants), err)
	}
	a.announced.Add(ctx, res.Appended)
	a.mu.Lock()
	for i, t := range tenants {
		if i >= len(res.Marks) {
			break
		}
		if m, err := ParseID(res.Marks[i]); err == nil {
			if k, ok := a.known[t]; !ok || k.Less(m) {
				a.known[t] = m
			}
		}
	}
	a.mu.Unlock()
	return nil
}
