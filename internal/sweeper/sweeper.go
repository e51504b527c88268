package sweeper

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/cyclesgo/cycles-go/internal/defaults"
	"github.com/cyclesgo/cycles-go/internal/eventctx"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/reqctx"
	"github.com/cyclesgo/cycles-go/internal/script"
	"github.com/cyclesgo/cycles-go/internal/telemetry"
)

// Defaults and bounds of Options.
const (
	DefaultInterval   = 5 * time.Second
	DefaultBatchSize  = 1000
	MaxBatchSize      = 10000
	DefaultWorkers    = 4
	DefaultTenantPage = 500
	// DefaultReconcileInterval bounds how long a crash can delay events in
	// the all-tenant feed.
	DefaultReconcileInterval = 10 * time.Minute
)

// Outcomes of one candidate, as counted by cycles.sweeper.outcomes{outcome}.
const (
	OutcomeExpired     = "expired"
	OutcomeSkipped     = "skipped"
	OutcomeInGrace     = "in_grace"
	OutcomeNotFound    = "not_found"
	OutcomeQuarantined = "quarantined"
)

// Options configure a Sweeper.
type Options struct {
	// Interval is the pause after a sweep that left nothing due; default 5 s.
	Interval time.Duration
	// BatchSize is the most reservations one script call expires (and the
	// bound of the work and memory of one call); default 1,000, max 10,000.
	BatchSize int
	// Workers is how many tenants are swept concurrently; default 4.
	Workers int
	// TenantPage is how many registry entries are read per page; default 500.
	TenantPage int
	// EventRetention is passed to the expire script for its stream trim;
	// default eventctx.DefaultRetention.
	EventRetention time.Duration
	// Reconcile, when set, is given every tenant's newest event id once per
	// ReconcileInterval (and on the first sweep), so the all-tenant feed can
	// repair announcements a crashed replica never made
	// (events.Announcer.Reconcile, internal/events/doc.go).
	Reconcile func(tenant, tail string)
	// Archive is on when an archive is configured (-archive-dsn): an expired
	// record then joins its tenant's archive queue instead of getting the
	// terminal-retention TTL (lua/sweeper/expire_batch.lua ARGV[5]).
	Archive bool
	// ReconcileInterval is how often a sweep reports tails; default 10 min.
	ReconcileInterval time.Duration
	MeterProvider     metric.MeterProvider
	Logger            *zap.Logger
}

// Counts are per-outcome totals.
type Counts struct {
	Expired     int64 `json:"expired"`
	Skipped     int64 `json:"skipped"`
	InGrace     int64 `json:"in_grace"`
	NotFound    int64 `json:"not_found"`
	Quarantined int64 `json:"quarantined"`
}

// Add returns c + o.
func (c Counts) Add(o Counts) Counts {
	return Counts{
		Expired: c.Expired + o.Expired, Skipped: c.Skipped + o.Skipped, InGrace: c.InGrace + o.InGrace,
		NotFound: c.NotFound + o.NotFound, Quarantined: c.Quarantined + o.Quarantined,
	}
}

// Processed is the number of index entries handled.
func (c Counts) Processed() int64 {
	return c.Expired + c.Skipped + c.InGrace + c.NotFound + c.Quarantined
}

// Status is what an operator sees.
type Status struct {
	// Running is true while Run is looping.
	Running         bool
	Interval        time.Duration
	BatchSize       int
	LastRunStarted  time.Time
	LastRunDuration time.Duration
	// Backlog is the number of due index entries the last completed sweep
	// found when it reached each tenant (summed over tenants).
	Backlog int64
	// Totals are cumulative since this process started.
	Totals  Counts
	LastRun Counts
	// LastError is the error of the last completed sweep, if any.
	LastError string
}

// Sweeper expires reservations past expires_at + grace across all tenants.
type Sweeper struct {
	exec *script.Executor
	opts Options
	log  *zap.Logger

	sem     chan struct{} // one sweep at a time per process
	running atomic.Bool
	// lastReconcile is when a sweep last reported tails (guarded by sem).
	lastReconcile time.Time

	mu     sync.Mutex
	status Status

	outcomes metric.Int64Counter
	sweeps   metric.Int64Counter
	batches  metric.Int64Counter
	errs     metric.Int64Counter
	skipped  metric.Int64Counter
}

// New builds a Sweeper; it does not start it.
func New(exec *script.Executor, opts Options) *Sweeper {
	defaults.Set(&opts.Interval, DefaultInterval)
	defaults.Set(&opts.BatchSize, DefaultBatchSize)
	defaults.Cap(&opts.BatchSize, MaxBatchSize)
	defaults.Set(&opts.Workers, DefaultWorkers)
	defaults.Set(&opts.TenantPage, DefaultTenantPage)
	defaults.Set(&opts.EventRetention, eventctx.DefaultRetention)
	defaults.Set(&opts.ReconcileInterval, DefaultReconcileInterval)
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	m := telemetry.Meter(opts.MeterProvider, "sweeper")
	return &Sweeper{
		exec:     exec,
		opts:     opts,
		log:      log,
		sem:      make(chan struct{}, 1),
		status:   Status{Interval: opts.Interval, BatchSize: opts.BatchSize},
		outcomes: telemetry.MustCounter(m, "cycles.sweeper.outcomes", "Deadline-index entries handled by the sweeper, by outcome (expired, skipped, in_grace, not_found, quarantined)"),
		sweeps:   telemetry.MustCounter(m, "cycles.sweeper.sweeps", "Completed sweeps over all tenants"),
		batches:  telemetry.MustCounter(m, "cycles.sweeper.batches", "Expire-batch script calls"),
		errs:     telemetry.MustCounter(m, "cycles.sweeper.errors", "Failed sweeper script calls"),
		skipped:  telemetry.MustCounter(m, "cycles.sweeper.paused_intervals", "Background sweeps skipped because the sweeper is paused (OpsService.PauseSweeper)"),
	}
}

// Run sweeps until ctx ends: a sweep drains everything due, then Run waits
// Interval. Errors are logged and retried on the next sweep; Run returns nil
// when ctx ends.
func (s *Sweeper) Run(ctx context.Context) error {
	s.running.Store(true)
	defer s.running.Store(false)
	s.log.Info("expiry sweeper started", zap.Duration("interval", s.opts.Interval), zap.Int("batch_size", s.opts.BatchSize))
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		// The pause flag lives in Redis so one call pauses every replica.
		// If it cannot be read, sweep anyway: a stuck sweeper holds money.
		if p, err := s.PauseState(ctx); err == nil && p.Paused {
			s.skipped.Add(ctx, 1)
			t.Reset(s.opts.Interval)
			continue
		}
		c, err := s.SweepOnce(ctx)
		if err != nil && ctx.Err() == nil {
			s.log.Warn("sweep failed (retried next interval)", zap.Error(err))
		} else if c.Processed() > 0 {
			s.log.Info("sweep", zap.Int64("expired", c.Expired), zap.Int64("skipped", c.Skipped),
				zap.Int64("in_grace", c.InGrace), zap.Int64("not_found", c.NotFound), zap.Int64("quarantined", c.Quarantined))
		}
		t.Reset(s.opts.Interval)
	}
}

// SweepOnce walks the whole tenant registry and drains every tenant's due
// reservations, batch after batch. It returns the outcome counts; an error of
// one tenant does not stop the others (errors are joined). Concurrent calls in
// one process run one after the other.
func (s *Sweeper) SweepOnce(ctx context.Context) (Counts, error) {
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return Counts{}, ctx.Err()
	}
	defer func() { <-s.sem }()

	start := time.Now()
	reconcile := s.opts.Reconcile != nil && (s.lastReconcile.IsZero() || start.Sub(s.lastReconcile) >= s.opts.ReconcileInterval)
	var (
		mu      sync.Mutex
		total   Counts
		backlog int64
		errs    []error
	)
	work := make(chan string)
	var wg sync.WaitGroup
	for i := 0; i < s.opts.Workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for tenant := range work {
				c, due, err := s.drain(ctx, tenant, reconcile, false)
				mu.Lock()
				total = total.Add(c)
				backlog += due
				if err != nil {
					errs = append(errs, err)
				}
				mu.Unlock()
			}
		}()
	}
	err := s.walkTenants(ctx, func(tenant string) bool {
		select {
		case work <- tenant:
			return true
		case <-ctx.Done():
			return false
		}
	})
	close(work)
	wg.Wait()
	if err != nil {
		errs = append(errs, err)
	}
	if ctx.Err() != nil {
		errs = append(errs, ctx.Err())
	}
	err = errors.Join(errs...)
	if reconcile && err == nil {
		s.lastReconcile = start
	}

	s.sweeps.Add(ctx, 1)
	s.mu.Lock()
	s.status.LastRunStarted = start
	s.status.LastRunDuration = time.Since(start)
	s.status.Backlog = backlog
	s.status.Totals = s.status.Totals.Add(total)
	s.status.LastRun = total
	s.status.LastError = ""
	if err != nil {
		s.status.LastError = err.Error()
	}
	s.mu.Unlock()
	return total, err
}

// Status is a snapshot of the sweeper's state.
func (s *Sweeper) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.status
	st.Running = s.running.Load()
	return st
}

// walkTenants calls visit for every registered tenant, one bounded page at a
// time, until visit returns false.
func (s *Sweeper) walkTenants(ctx context.Context, visit func(string) bool) error {
	if err := WalkTenants(ctx, s.exec, "", s.opts.TenantPage, visit); err != nil {
		s.errs.Add(ctx, 1, metric.WithAttributes(attribute.String("script", "tenants")))
		return err
	}
	return nil
}

// The sweeper's scripts (lua/sweeper/). scriptTenants reads one page of the
// global tenant registry (TenantPage); the operator service pages tenants
// with it too.
var (
	scriptTenants      = script.Bind[tenantsKeys, tenantsArgs]("sweeper/tenants")
	scriptExpireBatch  = script.Bind[expireKeys, expireArgs]("sweeper/expire_batch")
	scriptSweepControl = script.Bind[controlKeys, controlArgs]("ops/sweeper_control")
)

type tenantsKeys struct {
	Tenants string `lua:"tenants"`
}

type tenantsArgs struct {
	After    string `lua:"after"`
	PageSize int    `lua:"page_size"`
}

type expireKeys struct {
	Prefix    string `lua:"tenant_prefix"`
	Deadlines string `lua:"deadlines"`
	Events    string `lua:"event_stream"`
}

type expireArgs struct {
	BatchSize int    `lua:"batch_size"`
	EventCtx  string `lua:"event_ctx"`
	Tail      string `lua:"tail"`       // "tail" or ""
	MustExist string `lua:"must_exist"` // "tenant" or ""
	Archive   string `lua:"archive"`    // "1" or ""
}

type controlKeys struct {
	Control string `lua:"control"`
}

type controlArgs struct {
	Op     string `lua:"op"`
	Reason string `lua:"reason"`
}

// TenantPage reads up to pageSize registered tenant ids after `after` (""
// = from the first), in lex order; a shorter page is the last one.
func TenantPage(ctx context.Context, exec *script.Executor, after string, pageSize int) ([]string, error) {
	var page struct {
		Tenants script.LuaArray[string] `json:"tenants"`
	}
	if err := scriptTenants.RunInto(ctx, exec, &page, tenantsKeys{keys.Tenants}, tenantsArgs{after, pageSize}); err != nil {
		return nil, err
	}
	return page.Tenants, nil
}

// WalkTenants calls visit for every registered tenant after `after` (""
// = from the first), reading the registry pageSize names at a time, until
// visit returns false. The operator service walks tenants with it too.
func WalkTenants(ctx context.Context, exec *script.Executor, after string, pageSize int, visit func(string) bool) error {
	for {
		page, err := TenantPage(ctx, exec, after, pageSize)
		if err != nil {
			return fmt.Errorf("read tenant registry after %q: %w", after, err)
		}
		for _, t := range page {
			if !visit(t) {
				return nil
			}
		}
		if len(page) < pageSize {
			return nil
		}
		after = page[len(page)-1]
	}
}

// batchResult is the result of lua/sweeper/expire_batch.lua.
type batchResult struct {
	Counts
	Now       int64                          `json:"now"`
	DueBefore int64                          `json:"due_before"`
	Due       int64                          `json:"due"`
	Q         script.LuaArray[quarantineRow] `json:"q"`
	Tail      string                         `json:"tail"`
}

type quarantineRow struct {
	ID     string `json:"id"`
	Reason string `json:"reason"`
}

// drain runs the batch script for tenant until nothing is due. It returns the
// counts and the number of entries that were due when it started.
// With reconcile, the first batch also reports the tenant's newest event id
// to Options.Reconcile.
func (s *Sweeper) drain(ctx context.Context, tenant string, reconcile, mustExist bool) (Counts, int64, error) {
	var total Counts
	var dueAtStart int64
	for first := true; ; first = false {
		r, err := s.batch(ctx, tenant, reconcile && first, mustExist && first)
		if err != nil {
			return total, dueAtStart, err
		}
		if first {
			dueAtStart = r.DueBefore
			if reconcile && r.Tail != "" {
				s.opts.Reconcile(tenant, r.Tail)
			}
		}
		total = total.Add(r.Counts)
		// Every outcome removes or re-scores its entry past now, so a batch
		// always makes progress; the check guards against a broken index.
		if r.Due == 0 || r.Counts.Processed() == 0 {
			return total, dueAtStart, nil
		}
	}
}

// batch runs one expire-batch call for tenant (at most BatchSize entries) and
// counts its outcomes. mustExist has the script refuse TENANT_NOT_FOUND for a
// tenant without a record (an operator naming one; the background sweep
// walks the registry).
func (s *Sweeper) batch(ctx context.Context, tenant string, tail, mustExist bool) (batchResult, error) {
	t := keys.Tenant(tenant)
	var r batchResult
	tailArg, tenantArg := "", ""
	if tail {
		tailArg = "tail"
	}
	if mustExist {
		tenantArg = "tenant"
	}
	archive := ""
	if s.opts.Archive {
		archive = "1"
	}
	err := scriptExpireBatch.RunInto(ctx, s.exec, &r, expireKeys{t.Prefix(), t.Deadlines(), t.Events()},
		expireArgs{s.opts.BatchSize, s.eventContext(), tailArg, tenantArg, archive})
	s.batches.Add(ctx, 1)
	if err != nil {
		s.errs.Add(ctx, 1, metric.WithAttributes(attribute.String("script", "expire_batch")))
		return r, fmt.Errorf("expire batch of tenant %s: %w", tenant, err)
	}
	s.count(ctx, r.Counts)
	for _, q := range r.Q {
		s.log.Warn("reservation quarantined (kept, flagged, removed from the deadline index)",
			zap.String("tenant", tenant), zap.String("reservation_id", q.ID), zap.String("reason", q.Reason))
	}
	return r, nil
}

func (s *Sweeper) count(ctx context.Context, c Counts) {
	for _, o := range []struct {
		name string
		n    int64
	}{
		{OutcomeExpired, c.Expired}, {OutcomeSkipped, c.Skipped}, {OutcomeInGrace, c.InGrace},
		{OutcomeNotFound, c.NotFound}, {OutcomeQuarantined, c.Quarantined},
	} {
		if o.n > 0 {
			s.outcomes.Add(ctx, o.n, metric.WithAttributes(attribute.String("outcome", o.name)))
		}
	}
}

// eventContext is the event ARGV of one batch: actor system, no request id,
// and a fresh trace id per batch (the protocol wants one on every event).
func (s *Sweeper) eventContext() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	ctx := reqctx.WithTraceID(context.Background(), hex.EncodeToString(b[:]))
	return eventctx.Arg(ctx, s.opts.EventRetention)
}
