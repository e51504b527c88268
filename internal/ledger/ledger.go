// Package ledger is the budget authority of cyclesd (docs/protocol.md): reserve,
// commit, release, extend, decide, direct-debit events and the reads of the
// runtime plane. Every decision and mutation is one Lua script (lua/ledger/*)
// run through internal/script; this package only derives keys and arguments,
// hashes payloads for idempotency, and reads the scripts' replies into
// responses: the mutations' flat replies field by field (reply.go), the reads'
// JSON. It never reads ledger state to decide anything in Go.
//
// Methods take the effective tenant explicitly (the caller authenticated it);
// every key they touch carries that tenant's hash tag.
package ledger

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/cyclesgo/cycles-go/internal/actionkind"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/defaults"
	"github.com/cyclesgo/cycles-go/internal/eventctx"
	"github.com/cyclesgo/cycles-go/internal/script"
	"github.com/cyclesgo/cycles-go/internal/telemetry"
)

// DefaultGraceMs is the grace period when a reserve does not set one.
const DefaultGraceMs = 5000

// Options configure a Ledger.
type Options struct {
	// MeterProvider receives the ledger's counters (nil = no-op).
	MeterProvider metric.MeterProvider
	// EventRetention is how long events stay in a tenant's stream
	// (0 = eventctx.DefaultRetention).
	EventRetention time.Duration
	// TenantLabel adds the caller's tenant to every counter (off: bounded
	// cardinality for deployments with very many tenants).
	TenantLabel bool
	// Archive is on when an archive is configured (-archive-dsn): the
	// settling scripts then queue each terminal record for the archiver
	// instead of giving it the terminal-retention TTL (finalize in
	// lua/lib/ledger_reservation.lua). Every replica must agree on it.
	Archive bool
	// Archived, when set, finds a reservation past the hot window in the
	// archive: its Redis record's fields (internal/archiver Reader). Get
	// then answers from them exactly as from Redis.
	Archived func(ctx context.Context, tenant, id string) (map[string]string, bool, error)
	// ArchivedList, when set, pages a tenant's archived reservations
	// (internal/archiver Reader): ListReservations then merges them with
	// the Redis walk, in order, each reservation once.
	ArchivedList func(ctx context.Context, tenant string, q ArchiveQuery) ([]ArchivedRecord, error)
	// Kinds classifies a request's action kind for the v0.1.26 risk-class
	// quotas (nil: the built-in registry without custom kinds).
	Kinds *actionkind.Registry
}

// Ledger runs the ledger scripts.
type Ledger struct {
	exec      *script.Executor
	retention time.Duration
	// archive is the settling scripts' archive ARGV: "1" or "".
	archive  string
	archived func(ctx context.Context, tenant, id string) (map[string]string, bool, error)
	// archivedList pages archived reservations (nil: listings are Redis's).
	archivedList func(ctx context.Context, tenant string, q ArchiveQuery) ([]ArchivedRecord, error)
	m            counters
	// newID makes the UUIDv4 of reservation ids (see ids.go) and event ids.
	newID func() string
	kinds *actionkind.Registry
}

// counters are the user-visible effects of the ledger (telemetry conventions:
// every one is asserted by a test).
type counters struct {
	created    telemetry.TenantCounter // live reservations created {decision}
	committed  telemetry.TenantCounter // reservations committed
	released   telemetry.TenantCounter // reservations released {reason}
	extended   telemetry.TenantCounter // reservations extended
	denied     telemetry.TenantCounter // budget denials {operation, reason}
	decisions  telemetry.TenantCounter // dry-run and decide evaluations {operation, decision}
	overages   telemetry.TenantCounter // commits with actual > estimate
	debt       telemetry.TenantCounter // debt incurred, in units {unit}
	eventsMade telemetry.TenantCounter // direct-debit events applied
	replays    telemetry.TenantCounter // idempotent replays {operation}
	refusals   telemetry.TenantCounter // refused mutations {operation, code}
}

// New returns a Ledger running its scripts through exec.
func New(exec *script.Executor, opts Options) *Ledger {
	meter := telemetry.Meter(opts.MeterProvider, "ledger")
	retention := opts.EventRetention
	defaults.Set(&retention, eventctx.DefaultRetention)
	kinds := opts.Kinds
	if kinds == nil {
		// The built-in registry cannot fail to build (no custom kinds).
		kinds, _ = actionkind.New(nil)
	}
	archive := ""
	if opts.Archive {
		archive = "1"
	}
	return &Ledger{
		kinds:        kinds,
		exec:         exec,
		retention:    retention,
		archive:      archive,
		archived:     opts.Archived,
		archivedList: opts.ArchivedList,
		newID:        newUUID,
		m: counters{
			created:    telemetry.NewTenantCounter(meter, "cycles.reservations.created", "Live reservations created", opts.TenantLabel),
			committed:  telemetry.NewTenantCounter(meter, "cycles.reservations.committed", "Reservations committed", opts.TenantLabel),
			released:   telemetry.NewTenantCounter(meter, "cycles.reservations.released", "Reservations released (reason client or tenant_closed)", opts.TenantLabel),
			extended:   telemetry.NewTenantCounter(meter, "cycles.reservations.extended", "Reservation extensions applied", opts.TenantLabel),
			denied:     telemetry.NewTenantCounter(meter, "cycles.reservations.denied", "Budget denials: live reserve refusals and dry-run/decide DENY, by reason", opts.TenantLabel),
			decisions:  telemetry.NewTenantCounter(meter, "cycles.decisions", "Dry-run and decide evaluations, by decision", opts.TenantLabel),
			overages:   telemetry.NewTenantCounter(meter, "cycles.commit.overages", "Commits whose actual exceeded the estimate", opts.TenantLabel),
			debt:       telemetry.NewTenantCounter(meter, "cycles.debt.incurred", "Debt incurred by commits and events, in the amount's unit", opts.TenantLabel),
			eventsMade: telemetry.NewTenantCounter(meter, "cycles.events.created", "Direct-debit events applied", opts.TenantLabel),
			replays:    telemetry.NewTenantCounter(meter, "cycles.idempotency.replays", "Idempotent replays answered from a stored response", opts.TenantLabel),
			refusals:   telemetry.NewTenantCounter(meter, "cycles.ledger.refusals", "Ledger mutations refused by a script, by protocol code", opts.TenantLabel),
		},
	}
}

// budgetDenials are the refusals of a live reserve that a dry run would have
// answered with DENY (counted as denials, not just refusals).
var budgetDenials = map[apierr.Code]bool{
	apierr.BudgetExceeded: true, apierr.BudgetFrozen: true, apierr.BudgetClosed: true,
	apierr.OverdraftLimitExceeded: true, apierr.DebtOutstanding: true, apierr.TenantClosed: true,
	apierr.TenantSuspended: true, apierr.NotFound: true,
}

// refused counts a script refusal and returns err unchanged.
func (l *Ledger) refused(ctx context.Context, op string, err error) error {
	if ae, ok := apierr.As(err); ok {
		l.m.refusals.Add(ctx, 1, attribute.String("operation", op), attribute.String("code", string(ae.Code)))
		if op == "reserve" && budgetDenials[ae.Code] {
			reason := string(ae.Code)
			if ae.Code == apierr.NotFound {
				reason = "BUDGET_NOT_FOUND"
			}
			l.m.denied.Add(ctx, 1, attribute.String("operation", op), attribute.String("reason", reason))
		}
	}
	return err
}

func (l *Ledger) replayed(ctx context.Context, op string) {
	l.m.replays.Add(ctx, 1, attribute.String("operation", op))
}

// incurred counts the debt a commit or an event took on, by unit.
func (l *Ledger) incurred(ctx context.Context, debt num, unit string) {
	if debt > 0 {
		l.m.debt.Add(ctx, int64(debt), attribute.String("unit", unit))
	}
}

// eventContext is the event-context ARGV of one script call.
func (l *Ledger) eventContext(ctx context.Context) string {
	return eventctx.Arg(ctx, l.retention)
}
