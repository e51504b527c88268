package ledgerops

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/cyclesgo/cycles-go/internal/defaults"
	"github.com/cyclesgo/cycles-go/internal/eventctx"
	"github.com/cyclesgo/cycles-go/internal/script"
	"github.com/cyclesgo/cycles-go/internal/sweeper"
	"github.com/cyclesgo/cycles-go/internal/telemetry"
)

// The operator scripts (lua/ops/): audits, repair and quarantine, each call
// on its own.
var (
	scriptAuditBudgets      = script.Bind[prefixKeys, budgetPageArgs]("ops/audit_budgets", script.Returns[budgetsPage]())
	scriptAuditIndex        = script.Bind[prefixKeys, indexPageArgs]("ops/audit_index", script.Returns[indexPage]())
	scriptAuditRecords      = script.Bind[prefixKeys, zpageArgs]("ops/audit_records", script.Returns[recordsPage]())
	scriptHolds             = script.Bind[prefixKeys, holdsArgs]("ops/holds", script.Returns[holdsResult]())
	scriptQuarantineList    = script.Bind[prefixKeys, zpageArgs]("ops/quarantine_list", script.Returns[zpage[quarantineRow]]())
	scriptQuarantineResolve = script.Bind[settleKeys, resolveArgs]("ops/quarantine_resolve", script.Returns[resolveResult]())
	scriptRepair            = script.Bind[settleKeys, repairArgs]("ops/repair", script.Returns[repairResult]())
)

// prefixKeys are the KEYS of the scripts that derive every key from the
// tenant's prefix.
type prefixKeys struct {
	Prefix string `lua:"tenant_prefix"`
}

// zpageArgs page an index by (member, score) cursor.
type zpageArgs struct {
	Member   string `lua:"cursor_member"`
	Score    string `lua:"cursor_score"`
	PageSize int    `lua:"page_size"`
}

type indexPageArgs struct {
	Index    string `lua:"index"` // deadline | quarantine
	Member   string `lua:"cursor_member"`
	Score    string `lua:"cursor_score"`
	PageSize int    `lua:"page_size"`
}

type budgetPageArgs struct {
	After    string `lua:"after"`
	PageSize int    `lua:"page_size"`
}

type holdsArgs struct {
	Limit    int    `lua:"limit"`
	ExtraIDs string `lua:"extra_ids"` // JSON array
	Members  string `lua:"members"`   // JSON array
}

// settleKeys are the KEYS of the operator's writes.
type settleKeys struct {
	Prefix string `lua:"tenant_prefix"`
	Idem   string `lua:"idem_record"`
	Events string `lua:"event_stream"`
}

type resolveArgs struct {
	ID             string `lua:"reservation_id"`
	Outcome        string `lua:"outcome"`
	Resolution     string `lua:"resolution"` // JSON
	Reason         string `lua:"reason"`
	PayloadHash    string `lua:"payload_hash"`
	IdemLifetimeMs int64  `lua:"idem_lifetime_ms"`
	EventCtx       string `lua:"event_ctx"`
	Archive        string `lua:"archive"` // "1" or ""
}

type repairArgs struct {
	Plan           string `lua:"plan"` // JSON
	Apply          bool   `lua:"apply"`
	PayloadHash    string `lua:"payload_hash"`
	IdemLifetimeMs int64  `lua:"idem_lifetime_ms"`
	EventCtx       string `lua:"event_ctx"`
	HoldsLimit     int    `lua:"holds_limit"`
}

// ReplayWindow is how long a resolve or repair response is replayed by key.
const ReplayWindow = 24 * time.Hour

// maxPageSize bounds Options.PageSize: a larger one takes the default.
const maxPageSize = 1000

// Options configure a Service.
type Options struct {
	// HoldsLimit bounds the ACTIVE reservations one holds or repair script
	// reads (about 20 ms of Redis time per 10,000).
	HoldsLimit int
	// PageSize is the records, index entries or budgets per audit script
	// call (at most 1,000).
	PageSize int
	// AuditInterval is the pause between background audits of all tenants;
	// 0 turns the background auditor off.
	AuditInterval time.Duration
	// AuditRate is how many tenants per second the background auditor audits.
	AuditRate float64
	// Timeout bounds one operator call (audit, repair), which is detached
	// from the short per-RPC deadline but still ends when the client cancels.
	Timeout        time.Duration
	EventRetention time.Duration
	// Archive is on when an archive is configured (-archive-dsn): a
	// resolved (released or expired) quarantined record then joins the
	// archive queue instead of getting its TTL, and a settled record
	// without a TTL is expected (it waits for the archiver), not a finding.
	Archive       bool
	MeterProvider metric.MeterProvider
	Logger        *zap.Logger
}

// DefaultOptions are the settings an Options field left at zero takes in New
// (defaults.Fill).
func DefaultOptions() Options {
	return Options{
		HoldsLimit:     20000,
		PageSize:       500,
		AuditRate:      5,
		Timeout:        2 * time.Minute,
		EventRetention: eventctx.DefaultRetention,
	}
}

// archive is the scripts' archive ARGV: "1" or "".
func (s *Service) archive() string {
	if s.opts.Archive {
		return "1"
	}
	return ""
}

// Service runs the operator scripts.
type Service struct {
	exec *script.Executor
	opts Options
	log  *zap.Logger

	resolved      metric.Int64Counter
	repairs       metric.Int64Counter
	audits        metric.Int64Counter
	discrepancies metric.Int64Gauge
}

// New builds a Service.
func New(exec *script.Executor, opts Options) *Service {
	if opts.PageSize > maxPageSize {
		opts.PageSize = 0
	}
	defaults.Fill(&opts, DefaultOptions())
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	m := telemetry.Meter(opts.MeterProvider, "ledgerops")
	g, err := m.Int64Gauge("cycles.audit.discrepancies",
		metric.WithDescription("Ledger discrepancies found by the last background audit of all tenants, by kind (docs/operations-runbook.md)"))
	if err != nil {
		panic(fmt.Sprintf("ledgerops: gauge: %v", err))
	}
	return &Service{
		exec: exec, opts: opts, log: log,
		resolved:      telemetry.MustCounter(m, "cycles.ops.quarantine_resolved", "Quarantined reservations resolved by an operator, by outcome"),
		repairs:       telemetry.MustCounter(m, "cycles.ops.repairs", "Changes applied by RepairTenant, by kind"),
		audits:        telemetry.MustCounter(m, "cycles.audit.tenants", "Tenant audits run (OpsService.AuditTenant, RepairTenant and the background auditor)"),
		discrepancies: g,
	}
}

// opContext detaches ctx from its (short, per-RPC) deadline but not from the
// client's cancellation, and bounds it with Options.Timeout.
func (s *Service) opContext(ctx context.Context) (context.Context, context.CancelFunc) {
	op, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.Timeout)
	stop := context.AfterFunc(ctx, func() {
		if ctx.Err() == context.Canceled {
			cancel()
		}
	})
	return op, func() { stop(); cancel() }
}

// eventContext is the event ARGV of a mutation: the caller (admin) as actor.
func (s *Service) eventContext(ctx context.Context) string {
	return eventctx.Arg(ctx, s.opts.EventRetention)
}

// luaMap decodes a JSON object returned by a script, and also the "[]" the
// embedded store produces for an empty Lua table.
type luaMap[V any] map[string]V

// UnmarshalJSON implements json.Unmarshaler.
func (l *luaMap[V]) UnmarshalJSON(b []byte) error {
	if bytes.Equal(bytes.TrimSpace(b), []byte("[]")) {
		*l = nil
		return nil
	}
	return json.Unmarshal(b, (*map[string]V)(l))
}

// cursor is a zset page cursor of the ops scripts.
type cursor struct {
	Member string `json:"member"`
	Score  string `json:"score"`
}

// finding is one discrepancy row of the audit scripts (a record or an
// index entry: budget findings are made in Go).
type finding struct {
	Kind string           `json:"kind"`
	ID   string           `json:"id"`
	Msg  string           `json:"msg"`
	Ev   luaMap[jsonText] `json:"ev"`
	Fix  bool             `json:"fix"`
}

// jsonText accepts a JSON string or number (Lua numbers in evidence).
type jsonText string

// UnmarshalJSON implements json.Unmarshaler.
func (t *jsonText) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*t = jsonText(s)
		return nil
	}
	*t = jsonText(bytes.TrimSpace(b))
	return nil
}

func evidence(m luaMap[jsonText]) map[string]string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = string(v)
	}
	return out
}

// walkTenants calls visit for every registered tenant after `after`, one page
// at a time, until visit returns false.
func (s *Service) walkTenants(ctx context.Context, after string, visit func(string) bool) error {
	return sweeper.WalkTenants(ctx, s.exec, after, s.opts.PageSize, visit)
}
