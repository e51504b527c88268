package archiver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/cyclesgo/cycles-go/internal/archive"
	"github.com/cyclesgo/cycles-go/internal/defaults"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/script"
	"github.com/cyclesgo/cycles-go/internal/sweeper"
	"github.com/cyclesgo/cycles-go/internal/telemetry"
)

var (
	scriptLease = script.Bind[leaseKeys, leaseArgs]("archive/lease")
	scriptDone  = script.Bind[queueKeys, doneArgs]("archive/done")
)

type leaseKeys struct {
	Lease string `lua:"lease"`
	Fence string `lua:"fence"`
}

type leaseArgs struct {
	Op    string `lua:"op"` // acquire | release
	Owner string `lua:"owner"`
	TTLms int64  `lua:"ttl_ms"` // acquire only
}

type queueKeys struct {
	Prefix string `lua:"tenant_prefix"`
	Queue  string `lua:"archive_queue"`
}

type doneArgs struct {
	HotRetentionMs int64    `lua:"hot_retention_ms"`
	LastEntry      string   `lua:"last_entry"` // '': nothing to trim
	Records        []string `lua:"reservation_ids"`
}

// MaxBatchSize bounds ArchiverOptions.BatchSize.
const MaxBatchSize = 1000

// DefaultArchiverOptions are the settings an ArchiverOptions field left at
// zero takes in New (defaults.Fill); each field's comment says what it means.
func DefaultArchiverOptions() ArchiverOptions {
	return ArchiverOptions{
		HotRetention: 24 * time.Hour,
		BatchSize:    500,
		Pause:        time.Second,
		LeaseTTL:     30 * time.Second,
		LagWarning:   5 * time.Minute,
		TenantPage:   sweeper.DefaultOptions().TenantPage,
	}
}

// ArchiverOptions tune an Archiver.
type ArchiverOptions struct {
	// HotRetention is how long a settled record stays in Redis once
	// PostgreSQL holds it (-hot-retention).
	HotRetention time.Duration
	// BatchSize is the most queue entries one PostgreSQL transaction
	// archives; default 500, at most 1,000.
	BatchSize int
	// Pause is the wait after a round that found nothing to archive (and
	// between attempts to take the lease); default 1 s.
	Pause time.Duration
	// LeaseTTL is how long the lease outlives its holder's last renewal:
	// another replica takes over that long after a holder dies; default 30 s.
	LeaseTTL time.Duration
	// LagWarning is the lag past which Warnings reports (readiness); default 5 min.
	LagWarning time.Duration
	// TenantPage is how many registry entries are read per page.
	TenantPage    int
	MeterProvider metric.MeterProvider
	Logger        *zap.Logger
}

// Archiver copies settled reservations from the tenants' archive queues to
// PostgreSQL, exactly once, and only then starts their Redis TTL. One
// replica at a time holds the lease; its fence goes with every batch, so a
// holder whose lease lapsed cannot write behind its successor.
type Archiver struct {
	exec  *script.Executor
	store *archive.Store
	opts  ArchiverOptions
	log   *zap.Logger
	owner string

	// positions caches the archived position of each stream while this
	// replica holds the lease under posFence: only the holder writes them.
	// Used by Once only (one round at a time).
	positions map[string]string
	posFence  int64

	mu sync.Mutex
	// stats are the last completed round's figures.
	stats Stats
}

// Stats describe the archive queues as the last completed round found them.
type Stats struct {
	// Held reports whether this replica held the lease in that round.
	Held bool
	// Pending is the number of queued records summed over tenants (what
	// Redis holds that PostgreSQL does not yet).
	Pending int64
	// Lag is the age of the oldest queued record (0 when none).
	Lag time.Duration
	// Archived is the number of rows written since start.
	Archived int64
	// At is when the round ended (zero before the first).
	At time.Time
}

// New returns an archiver of exec's tenants into store.
func New(exec *script.Executor, store *archive.Store, o ArchiverOptions) (*Archiver, error) {
	defaults.Fill(&o, DefaultArchiverOptions())
	defaults.Cap(&o.BatchSize, MaxBatchSize)
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	a := &Archiver{exec: exec, store: store, opts: o, log: o.Logger, owner: hex.EncodeToString(id[:])}
	if err := a.registerMetrics(o.MeterProvider); err != nil {
		return nil, err
	}
	return a, nil
}

// registerMetrics publishes the last round's lag and pending count
// (cycles_archive_lag_seconds, cycles_archive_pending; the lease holder's
// only) and whether this replica held the lease (cycles_archive_lease_held,
// 1 or 0: which replica archives, e.g. the one to look at, or to kill in a
// failover test).
func (a *Archiver) registerMetrics(mp metric.MeterProvider) error {
	m := telemetry.Meter(mp, "archiver")
	lag, err := m.Float64ObservableGauge("cycles.archive.lag", metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest settled reservation not yet archived (last round of the lease holder)"))
	if err != nil {
		return fmt.Errorf("archive lag metric: %w", err)
	}
	pending, err := m.Int64ObservableGauge("cycles.archive.pending",
		metric.WithDescription("Settled reservations queued in Redis for the archive (last round of the lease holder)"))
	if err != nil {
		return fmt.Errorf("archive pending metric: %w", err)
	}
	held, err := m.Int64ObservableGauge("cycles.archive.lease.held",
		metric.WithDescription("1 when this replica held the archiver lease in its last round, else 0"))
	if err != nil {
		return fmt.Errorf("archive lease metric: %w", err)
	}
	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s := a.Stats()
		if !s.Held {
			o.ObserveInt64(held, 0)
			return nil // another replica archives: its figures are the true ones
		}
		o.ObserveInt64(held, 1)
		o.ObserveFloat64(lag, s.Lag.Seconds())
		o.ObserveInt64(pending, s.Pending)
		return nil
	}, lag, pending, held)
	if err != nil {
		return fmt.Errorf("archive metrics: %w", err)
	}
	return nil
}

// Stats returns the last completed round's figures.
func (a *Archiver) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stats
}

// Warnings names what an operator must look at (readiness): a lag past
// LagWarning. Empty when all is well or another replica holds the lease.
func (a *Archiver) Warnings() []string {
	s := a.Stats()
	if s.Held && s.Lag > a.opts.LagWarning {
		return []string{fmt.Sprintf("archive lag %s exceeds %s (%d reservations pending)",
			s.Lag.Truncate(time.Second), a.opts.LagWarning, s.Pending)}
	}
	return nil
}

// lease takes or renews the lease; it returns the fence (0: another
// replica holds it).
func (a *Archiver) lease(ctx context.Context) (int64, error) {
	var r struct {
		Held  bool  `json:"held"`
		Fence int64 `json:"fence"`
	}
	if err := scriptLease.RunInto(ctx, a.exec, &r, leaseKeys{keys.ArchiveLease, keys.ArchiveFence},
		leaseArgs{"acquire", a.owner, a.opts.LeaseTTL.Milliseconds()}); err != nil {
		return 0, fmt.Errorf("archive lease: %w", err)
	}
	if !r.Held {
		return 0, nil
	}
	return r.Fence, nil
}

// Release gives the lease up (at shutdown), so another replica takes over
// at once instead of after LeaseTTL.
func (a *Archiver) Release(ctx context.Context) error {
	var r struct{}
	return scriptLease.RunInto(ctx, a.exec, &r, leaseKeys{keys.ArchiveLease, keys.ArchiveFence}, leaseArgs{Op: "release", Owner: a.owner})
}

// Once runs one round if this replica holds (or takes) the lease: every
// tenant's queue is archived up to what it held when the round reached it,
// and its event and audit streams (then the global audit log) from their
// archived positions. It returns the rows written. One round at a time:
// Once is not safe for concurrent use.
func (a *Archiver) Once(ctx context.Context) (int64, error) {
	fence, err := a.lease(ctx)
	if err != nil {
		return 0, err
	}
	if fence == 0 {
		a.mu.Lock()
		a.stats.Held, a.stats.At = false, time.Now()
		a.mu.Unlock()
		return 0, nil
	}
	if fence != a.posFence || a.positions == nil {
		a.positions, a.posFence = map[string]string{}, fence
	}
	var (
		written, pending int64
		oldest           time.Duration
		renewed          = time.Now()
		firstErr         error
	)
	err = sweeper.WalkTenants(ctx, a.exec, "", a.opts.TenantPage, func(tenant string) bool {
		if time.Since(renewed) > a.opts.LeaseTTL/3 {
			f, err := a.lease(ctx)
			if err != nil || f != fence {
				firstErr = errors.Join(firstErr, err, errors.New("archive: lease lost mid-round"))
				return false
			}
			renewed = time.Now()
		}
		n, p, lag, err := a.drain(ctx, tenant, fence)
		written += n
		pending += p
		oldest = max(oldest, lag)
		for _, kind := range []streamKind{kindEvents, kindAudit} {
			if err == nil {
				n, err = a.drainStream(ctx, kind, tenant, fence)
				written += n
			}
		}
		if err != nil {
			firstErr = errors.Join(firstErr, err)
			// A fenced batch means a successor holds the lease: stop.
			return !errors.Is(err, archive.ErrFenced) && ctx.Err() == nil
		}
		return true
	})
	if err == nil && firstErr == nil {
		// The audit trail of operations that concern no tenant.
		n, err := a.drainStream(ctx, kindAudit, "", fence)
		written += n
		firstErr = err
		if err == nil {
			// The all-tenant feed: its order, for all-tenant readers past
			// its Redis retention (the events are archived per tenant above).
			n, err = a.drainStream(ctx, kindFeed, "", fence)
			written += n
			firstErr = err
		}
	}
	a.mu.Lock()
	a.stats.Held, a.stats.Pending, a.stats.Lag, a.stats.At = true, pending, oldest, time.Now()
	a.stats.Archived += written
	a.mu.Unlock()
	return written, errors.Join(err, firstErr)
}

// drain archives one tenant's queue batch by batch, up to the entries it
// held when the drain started (so a busy tenant cannot hold the round). It
// returns the rows written, the entries still queued and the age of the
// oldest of them.
//
// Redis and PostgreSQL work at once: while PostgreSQL stores a full batch,
// the next one is already read from Redis (the entries after it: the batch
// itself stays queued until archive/done), and the batch before it is
// finished (archive/done: TTLs, trim). Nothing is trimmed or given a TTL
// before its batch committed, batches are finished one at a time in queue
// order (archive/done trims the queue up to a batch's last entry), and a
// failure of either server ends the drain once everything it started is
// over: a batch read ahead is discarded, and the next round starts from the
// queue's head again (entries already stored are skipped by the position).
func (a *Archiver) drain(ctx context.Context, tenant string, fence int64) (written, pending int64, lag time.Duration, err error) {
	t := keys.Tenant(tenant)
	stream := "reservations/" + tenant
	b, err := a.read(ctx, t, "", a.opts.BatchSize, true)
	if err != nil {
		return 0, 0, 0, err
	}
	var finishing chan error // the previous batch's archive/done, running
	finished := func() error {
		if finishing == nil {
			return nil
		}
		err := <-finishing
		finishing = nil
		return err
	}
	// Every return below waits for the batch being finished first: no call
	// outlives the drain, and its error is reported.
	defer func() {
		if ferr := finished(); ferr != nil && err == nil {
			err = ferr
		}
	}()
	budget := b.pending
	// current: b was read after the last archive/done, so its pending count
	// and lag are the queue's (a batch read ahead counted the one before).
	current := true
	pos, havePos := "", false
	for {
		if len(b.entries) == 0 || budget <= 0 {
			if !current {
				if err := finished(); err != nil {
					return written, 0, 0, err
				}
				if b, err = a.read(ctx, t, "", 1, false); err != nil {
					return written, 0, 0, err
				}
			}
			return written, b.pending, b.lag(), nil
		}
		if !havePos {
			if pos, err = a.position(ctx, stream); err != nil {
				return written, b.pending, b.lag(), err
			}
			havePos = true
		}
		budget -= int64(len(b.entries))
		var ahead chan queueRead
		if budget > 0 && len(b.entries) == a.opts.BatchSize {
			ahead = make(chan queueRead, 1)
			from := b.entries[len(b.entries)-1].qid
			go func() {
				nb, err := a.read(ctx, t, from, a.opts.BatchSize, true)
				ahead <- queueRead{nb, err}
			}()
		}
		w, err := a.writeBatch(ctx, tenant, stream, fence, &pos, b)
		written += w
		// The batch before this one was finished meanwhile; this one is
		// finished only after it (archive/done trims up to a batch's end).
		if ferr := finished(); err == nil {
			err = ferr
		}
		if err != nil {
			if ahead != nil {
				<-ahead // waited for even on failure: no read outlives the drain
			}
			return written, b.pending, b.lag(), err
		}
		finishing = make(chan error, 1)
		go func(entries []queued) { finishing <- a.done(ctx, t, entries) }(b.entries)
		if ahead == nil {
			// The queue as it is once this batch is finished: the next batch
			// or, when the drain's budget is spent, only its length and
			// oldest entry (the rest is read again by the next round).
			if err := finished(); err != nil {
				return written, b.pending, b.lag(), err
			}
			if budget <= 0 {
				b, err = a.read(ctx, t, "", 1, false)
			} else {
				b, err = a.read(ctx, t, "", a.opts.BatchSize, true)
			}
			current = true
		} else {
			r := <-ahead
			b, err, current = r.b, r.err, false
		}
		if err != nil {
			return written, 0, 0, err
		}
	}
}

// queueRead is an archive/queue read done ahead.
type queueRead struct {
	b   queueBatch
	err error
}

// writeBatch writes one batch read from the queue (the entries past *pos)
// with its position; it returns the rows written and advances *pos. The
// entries that need no TTL (no record, or a record that cannot be archived)
// lose their fields, so archive/done only removes them.
func (a *Archiver) writeBatch(ctx context.Context, tenant, stream string, fence int64, pos *string, b queueBatch) (int64, error) {
	batch := archive.Batch{Stream: stream, Fence: fence, Position: *pos}
	for i := range b.entries {
		e := &b.entries[i]
		if !after(e.qid, *pos) {
			continue // archived by an earlier batch that crashed before archive/done
		}
		batch.Position = e.qid
		if len(e.fields) == 0 {
			a.log.Warn("archive: queued reservation has no record; dropping the queue entry",
				zap.String("tenant", tenant), zap.String("reservation_id", e.rid))
			continue
		}
		row, err := RowOf(tenant, e.rid, e.fields, b.now)
		if err != nil {
			// Not settled (cannot be queued by the ledger): it is queued
			// again when it settles.
			a.log.Warn("archive: dropping a queue entry", zap.String("tenant", tenant), zap.Error(err))
			e.fields = nil // no TTL for it: only the entry goes
			continue
		}
		batch.Reservations = append(batch.Reservations, row)
	}
	if batch.Position == *pos {
		return 0, nil
	}
	w, err := a.write(ctx, batch)
	if err != nil {
		return 0, err
	}
	*pos = batch.Position
	return w.Reservations, nil
}

// position returns the archived position of stream ("" = none yet),
// cached while the lease is held under one fence.
func (a *Archiver) position(ctx context.Context, stream string) (string, error) {
	if p, ok := a.positions[stream]; ok {
		return p, nil
	}
	p, err := a.store.Position(ctx, stream)
	if err != nil {
		return "", err
	}
	a.positions[stream] = p.Position
	return p.Position, nil
}

// write stores a batch and remembers its position; a failed write forgets
// the stream's (the transaction may or may not have committed).
func (a *Archiver) write(ctx context.Context, b archive.Batch) (archive.Written, error) {
	w, err := a.store.Write(ctx, b)
	if err != nil {
		delete(a.positions, b.Stream)
		return w, fmt.Errorf("archive %s: %w", b.Stream, err)
	}
	a.positions[b.Stream] = b.Position
	return w, nil
}

// queued is one archive queue entry and the record it names.
type queued struct {
	qid, rid string
	fields   map[string]string
}

// queueBatch is archive/queue's reply.
type queueBatch struct {
	now     time.Time
	pending int64
	entries []queued
}

// lag is the age of the batch's oldest entry (its queue id is the Redis
// TIME of the settle) on the batch's clock.
func (b queueBatch) lag() time.Duration {
	if len(b.entries) == 0 {
		return 0
	}
	ms, _, ok := script.ParseStreamID(b.entries[0].qid)
	if !ok {
		return 0
	}
	return max(0, b.now.Sub(time.UnixMilli(int64(ms))))
}

// read returns up to limit of t's queued entries with their records, the
// oldest first, or (after set) the oldest after queue id after. With
// records false the entries come without their records (only the queue's
// length and oldest entry are wanted).
//
// Two round trips, no script: the queue page (with its length and Redis
// TIME), then the records it names, with pipelined HGETALLs. Through a
// script each crossed Lua twice, which cost Redis more than reading them
// (BENCHMARKS.md). Nothing is lost by the split: only this archiver trims
// the queue, and a settled record no longer changes and has no TTL before
// its batch is archived, so reading it a moment later gives what one
// script would have read. A record gone meanwhile (it cannot be with the
// ledger's scripts; only by hand or by eviction) reads as empty, as a
// record gone before the queue read: its entry is dropped with a warning
// (writeBatch).
func (a *Archiver) read(ctx context.Context, t keys.Tenant, after string, limit int, records bool) (queueBatch, error) {
	page, err := a.exec.ReadStream(ctx, t.ArchiveQueue(), after, int64(limit))
	if err != nil {
		return queueBatch{}, fmt.Errorf("archive queue of %s: %w", t, err)
	}
	b := queueBatch{now: time.UnixMilli(page.Now.UnixMilli()).UTC(), pending: page.Len}
	n := len(page.Entries)
	b.entries = make([]queued, 0, n)
	for _, m := range page.Entries {
		rid, _ := m.Values["id"].(string)
		b.entries = append(b.entries, queued{qid: m.ID, rid: rid})
	}
	if !records || n == 0 {
		return b, nil
	}
	recKeys := make([]string, 0, n)
	for _, e := range b.entries {
		if e.rid != "" {
			recKeys = append(recKeys, t.Reservation(e.rid))
		}
	}
	recs, err := a.exec.ReadHashes(ctx, recKeys)
	if err != nil {
		return queueBatch{}, fmt.Errorf("archive records of %s: %w", t, err)
	}
	j := 0
	for i := range b.entries {
		if b.entries[i].rid != "" {
			b.entries[i].fields = recs[j]
			j++
		}
	}
	return b, nil
}

// done starts the hot-window TTL of the archived records and trims their
// queue entries (only after the PostgreSQL commit).
func (a *Archiver) done(ctx context.Context, t keys.Tenant, entries []queued) error {
	if len(entries) == 0 {
		return nil
	}
	rids := make([]string, 0, len(entries))
	for _, e := range entries {
		if len(e.fields) > 0 {
			rids = append(rids, e.rid)
		}
	}
	var r struct{}
	if err := scriptDone.RunInto(ctx, a.exec, &r, queueKeys{t.Prefix(), t.ArchiveQueue()},
		doneArgs{a.opts.HotRetention.Milliseconds(), entries[len(entries)-1].qid, rids}); err != nil {
		return fmt.Errorf("archive done of %s: %w", t, err)
	}
	return nil
}

// Run archives until ctx ends: a round, then (when it found nothing or
// failed) a pause. Failures (Redis or PostgreSQL down) are logged and
// retried, never fatal: the queue keeps growing in Redis meanwhile, nothing
// is lost. The lease is given up on the way out.
func (a *Archiver) Run(ctx context.Context) error {
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = a.Release(rctx)
	}()
	for {
		n, err := a.Once(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			a.log.Warn("archive round failed; retrying", zap.Error(err))
		}
		if n == 0 || err != nil {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(a.opts.Pause):
			}
		}
	}
}

// after reports whether queue id is past position ("" = the start).
func after(id, position string) bool {
	if position == "" {
		return true
	}
	m1, s1, ok1 := script.ParseStreamID(id)
	m2, s2, ok2 := script.ParseStreamID(position)
	if !ok1 || !ok2 {
		return true // a malformed position never hides an entry; rows are idempotent
	}
	return m1 > m2 || (m1 == m2 && s1 > s2)
}
