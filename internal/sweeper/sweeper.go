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

	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/defaults"
	"github.com/cyclesgo/cycles-go/internal/eventctx"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/reqctx"
	"github.com/cyclesgo/cycles-go/internal/script"
	"github.com/cyclesgo/cycles-go/internal/telemetry"
)

// Bounds of Options.
const (
	MaxBatchSize = 10000
	// MaxBatchTime bounds Options.BatchTime (the script refuses more than 1 s).
	MaxBatchTime = 100 * time.Millisecond
)

// DefaultOptions are the settings an Options field left at zero takes in New
// (defaults.Fill); each field's comment says what it means.
func DefaultOptions() Options {
	return Options{
		Interval:          5 * time.Second,
		BatchSize:         1000,
		BatchTime:         5 * time.Millisecond,
		CallTimeout:       500 * time.Millisecond,
		CallAttempts:      4,
		Workers:           4,
		TenantPage:        500,
		EventRetention:    eventctx.DefaultRetention,
		ReconcileInterval: 10 * time.Minute,
	}
}

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
	// BatchSize is the most reservations one script call expires (the bound
	// of the memory of one call); default 1,000, max 10,000.
	BatchSize int
	// BatchTime bounds the work of one script call by time: once a call has
	// run this long (Redis TIME, measured inside the script) it takes no
	// further candidate and the drain calls again at once. It is what keeps
	// a large backlog from holding Redis, and every other tenant's calls,
	// for tens or hundreds of milliseconds per call. Default 5 ms, max 100 ms.
	BatchTime time.Duration
	// CallTimeout is the deadline of one batch call (including its wait
	// behind other clients' commands; Redis's socket read timeout,
	// -redis-read-timeout, caps it too). Default 500 ms: a hundred times
	// BatchTime, so only a stalled Redis reaches it.
	CallTimeout time.Duration
	// CallAttempts is how many times in a row a drain tries a call that got
	// no reply (UNAVAILABLE: a timeout or a lost connection) before it leaves
	// the tenant to the next sweep; default 4. A retry is safe: a call that
	// ran but whose reply was lost expired its entries exactly once, and its
	// counts reach the next reply through the drain's tally in Redis.
	CallAttempts int
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
	defaults.Fill(&opts, DefaultOptions())
	defaults.Cap(&opts.BatchSize, MaxBatchSize)
	defaults.Cap(&opts.BatchTime, MaxBatchTime)
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
	Tally     string `lua:"sweep_tally"`
}

type expireArgs struct {
	BatchSize int    `lua:"batch_size"`
	EventCtx  string `lua:"event_ctx"`
	Tail      string `lua:"tail"`       // "tail" or ""
	MustExist string `lua:"must_exist"` // "tenant" or ""
	Archive   string `lua:"archive"`    // "1" or ""
	BudgetUs  int64  `lua:"budget_us"`  // BatchTime in µs
}

type controlKeys struct {
	Control string `lua:"control"`
}

type controlArgs struct {
	Op     string `lua:"op"`
	Reason string `lua:"reason"`
}

// RegistryPage is one page of the tenant registry (lua/sweeper/tenants.lua).
type RegistryPage struct {
	// Now is Redis TIME (ms) at the read.
	Now int64 `json:"now"`
	// N is the number of tenants registered.
	N int64 `json:"n"`
	// Tenants are the page's tenant ids, in lex order.
	Tenants script.LuaArray[string] `json:"tenants"`
}

// ReadRegistry reads up to pageSize registered tenant ids after `after` (""
// = from the first), in lex order; a shorter page is the last one.
func ReadRegistry(ctx context.Context, exec *script.Executor, after string, pageSize int) (RegistryPage, error) {
	var page RegistryPage
	err := scriptTenants.RunInto(ctx, exec, &page, tenantsKeys{keys.Tenants}, tenantsArgs{after, pageSize})
	return page, err
}

// TenantPage is the tenant ids of ReadRegistry.
func TenantPage(ctx context.Context, exec *script.Executor, after string, pageSize int) ([]string, error) {
	page, err := ReadRegistry(ctx, exec, after, pageSize)
	if err != nil {
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
	// TookUs is the Redis time the call spent (up to its last candidate).
	TookUs int64 `json:"took_us"`
	// Total is the drain's tally after this call: every outcome of the
	// drain so far, those of calls whose reply was lost included.
	Total tally `json:"total"`
}

// tally is the drain's running totals kept in Redis (keys.Tenant.SweepTally).
type tally struct {
	Counts
	DueBefore int64 `json:"due_before"`
}

type quarantineRow struct {
	ID     string `json:"id"`
	Reason string `json:"reason"`
}

// drain runs the batch script for tenant until nothing is due. It returns the
// counts and the number of entries that were due when it started.
// With reconcile, the first batch also reports the tenant's newest event id
// to Options.Reconcile.
//
// The counts come from the drain's tally in Redis, not from adding up
// replies: a call that timed out client-side may still have run (Redis
// finishes a script whatever the client does), and its outcomes then reach
// the next reply's Total. A call with no reply is retried (CallAttempts):
// re-running the script is safe, since whatever the lost call expired left
// the index, so nothing is expired or announced twice.
func (s *Sweeper) drain(ctx context.Context, tenant string, reconcile, mustExist bool) (Counts, int64, error) {
	tallyKey := keys.Tenant(tenant).SweepTally(newDrainID())
	var seen tally // the Total of the last reply
	answered := false
	for failures := 0; ; {
		r, err := s.batch(ctx, tenant, tallyKey, reconcile && !answered, mustExist && !answered)
		if err != nil {
			failures++
			if failures >= s.opts.CallAttempts || ctx.Err() != nil || !apierr.HasCode(err, apierr.Unavailable) {
				return seen.Counts, seen.DueBefore, err
			}
			s.log.Debug("expire batch got no reply; retrying (its outcome, if it ran, is in the drain's tally)",
				zap.String("tenant", tenant), zap.Int("attempt", failures), zap.Error(err))
			if err := sleep(ctx, time.Duration(failures)*s.opts.BatchTime*10); err != nil {
				return seen.Counts, seen.DueBefore, err
			}
			continue
		}
		failures = 0
		if !answered {
			answered = true
			if reconcile && r.Tail != "" {
				s.opts.Reconcile(tenant, r.Tail)
			}
		}
		// Counters advance by the tally's growth, which includes the
		// outcomes of any call whose reply was lost.
		s.count(ctx, r.Total.Counts.sub(seen.Counts))
		seen = r.Total
		// Every outcome removes or re-scores its entry past now, so a batch
		// always makes progress; the check guards against a broken index.
		if r.Due == 0 || r.Counts.Processed() == 0 {
			return seen.Counts, seen.DueBefore, nil
		}
	}
}

// sub returns c - o.
func (c Counts) sub(o Counts) Counts {
	return Counts{
		Expired: c.Expired - o.Expired, Skipped: c.Skipped - o.Skipped, InGrace: c.InGrace - o.InGrace,
		NotFound: c.NotFound - o.NotFound, Quarantined: c.Quarantined - o.Quarantined,
	}
}

// newDrainID names one drain's tally: 16 random hex digits.
func newDrainID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// batch runs one expire-batch call for tenant (at most BatchSize entries, at
// most about BatchTime of Redis time, within CallTimeout) adding its outcomes
// to the drain's tally at tallyKey. mustExist has the script refuse
// TENANT_NOT_FOUND for a tenant without a record (an operator naming one; the
// background sweep walks the registry).
func (s *Sweeper) batch(ctx context.Context, tenant, tallyKey string, tail, mustExist bool) (batchResult, error) {
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
	cctx, cancel := context.WithTimeout(ctx, s.opts.CallTimeout)
	defer cancel()
	err := scriptExpireBatch.RunInto(cctx, s.exec, &r, expireKeys{t.Prefix(), t.Deadlines(), t.Events(), tallyKey},
		expireArgs{s.opts.BatchSize, s.eventContext(), tailArg, tenantArg, archive, max(s.opts.BatchTime.Microseconds(), 1)})
	s.batches.Add(ctx, 1)
	if err != nil {
		s.errs.Add(ctx, 1, metric.WithAttributes(attribute.String("script", "expire_batch")))
		return r, fmt.Errorf("expire batch of tenant %s: %w", tenant, err)
	}
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
