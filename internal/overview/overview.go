// Package overview computes the admin dashboard's one-call snapshot
// (OverviewService.GetOverview, GET /v1/admin/overview; docs/protocol.md#admin-overview).
//
// The snapshot is a bounded walk: the tenant registry in tenant_id order,
// one read-only script per tenant (lua/overview/tenant.lua) that counts the
// tenant's budgets and the events of the window. Three bounds cap the work
// of one call however large the deployment: tenants read, budgets read and
// events read. When one of them stops the walk, the answer says so
// (coverage.capped) and its counts cover what was read. Nothing here scans
// the keyspace.
package overview

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/defaults"
	"github.com/cyclesgo/cycles-go/internal/events"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/scope"
	"github.com/cyclesgo/cycles-go/internal/script"
	"github.com/cyclesgo/cycles-go/internal/sweeper"
)

// Bounds of a snapshot.
const (
	// topN is the length of every top list (the spec's maxItems).
	topN = 10
	// registryPage is the tenants read per registry call.
	registryPage = 100
	// maxWindow is the longest window the tenant script accepts.
	maxWindow = 7 * 24 * time.Hour
	// perScript bounds what one tenant script reads (its own range check).
	perScript = 10000
)

var scriptTenant = script.Bind[tenantKeys, tenantArgs]("overview/tenant")

type tenantKeys struct {
	Prefix  string `lua:"tenant_prefix"`
	Record  string `lua:"tenant_record"`
	Budgets string `lua:"budget_index"`
	Events  string `lua:"event_stream"`
}

type tenantArgs struct {
	WindowMs    int64  `lua:"window_ms"`
	MaxBudgets  int    `lua:"max_budgets"`
	MaxEvents   int    `lua:"max_events"`
	DenialAfter string `lua:"denial_after"`
	ExpiryAfter string `lua:"expiry_after"`
}

// Options configure a Service; zero values take the defaults
// (DefaultOptions, docs/protocol.md#admin-overview).
type Options struct {
	// Window is the window of the event counts and recent events.
	Window time.Duration
	// MaxTenants bounds the tenants one snapshot reads.
	MaxTenants int
	// MaxBudgets bounds the budgets one snapshot reads (all tenants).
	MaxBudgets int
	// MaxEvents bounds the window's events one snapshot reads (all tenants).
	MaxEvents int
}

// DefaultOptions are the settings an Options field left at zero takes in New
// (defaults.Fill).
func DefaultOptions() Options {
	return Options{Window: time.Hour, MaxTenants: 1000, MaxBudgets: 10000, MaxEvents: 10000}
}

// Service computes snapshots.
type Service struct {
	exec *script.Executor
	opts Options
}

// New returns the overview service on exec.
func New(exec *script.Executor, opts Options) *Service {
	defaults.Fill(&opts, DefaultOptions())
	defaults.Cap(&opts.Window, maxWindow)
	return &Service{exec: exec, opts: opts}
}

// entry is one event stream entry.
type entry = script.StreamEntry

// part is one tenant's share (lua/overview/tenant.lua).
type part struct {
	Now     int64                     `json:"now"`
	Status  string                    `json:"st"`
	Observe string                    `json:"om"`
	Budgets int64                     `json:"bn"`
	BMore   bool                      `json:"bmore"`
	ByStat  map[string]int64          `json:"bs"`
	ByUnit  map[string]int64          `json:"bu"`
	Over    int64                     `json:"over"`
	Debt    int64                     `json:"debt"`
	OL      script.LuaArray[[]string] `json:"ol"`
	DS      script.LuaArray[[]string] `json:"ds"`
	Events  int64                     `json:"en"`
	EMore   bool                      `json:"emore"`
	Cats    map[string]int64          `json:"cats"`
	Reasons map[string]int64          `json:"reasons"`
	Den     script.LuaArray[entry]    `json:"den"`
	Exp     script.LuaArray[entry]    `json:"exp"`
}

// Get computes one snapshot.
func (s *Service) Get(ctx context.Context) (*cyclesv1.GetOverviewResponse, error) {
	resp := &cyclesv1.GetOverviewResponse{
		EventWindowSeconds:    int32(s.opts.Window / time.Second),
		TenantCounts:          &cyclesv1.OverviewTenantCounts{},
		BudgetCounts:          &cyclesv1.OverviewBudgetCounts{ByUnit: map[string]int64{}},
		EventCounts:           &cyclesv1.OverviewEventCounts{ByCategory: map[string]int64{}},
		RecentDenialsByReason: map[string]int64{},
		Coverage:              &cyclesv1.OverviewCoverage{},
	}
	cov := resp.Coverage
	var over, debt []row
	var denials, expiries []recent
	after := ""
walk:
	for {
		reg, err := sweeper.ReadRegistry(ctx, s.exec, after, registryPage)
		if err != nil {
			return nil, fmt.Errorf("overview: read the tenant registry: %w", err)
		}
		resp.AsOfMs = max(resp.AsOfMs, reg.Now)
		cov.TenantsRegistered = reg.N
		for _, t := range reg.Tenants {
			if cov.TenantsRead == int64(s.opts.MaxTenants) {
				cov.Capped = true
				break walk
			}
			p, err := s.tenant(ctx, t, s.opts.MaxBudgets-int(cov.BudgetsRead), s.opts.MaxEvents-int(cov.EventsRead),
				floor(denials), floor(expiries))
			if err != nil {
				return nil, err
			}
			cov.TenantsRead++
			resp.AsOfMs = max(resp.AsOfMs, p.Now)
			cov.Capped = cov.Capped || p.BMore || p.EMore
			o, d, err := add(resp, t, p)
			if err != nil {
				return nil, err
			}
			over, debt = append(over, o...), append(debt, d...)
			denials, expiries = keepNewest(denials, t, p.Den), keepNewest(expiries, t, p.Exp)
		}
		if len(reg.Tenants) < registryPage {
			break
		}
		after = reg.Tenants[len(reg.Tenants)-1]
	}
	for _, r := range top(over) {
		resp.OverLimitScopes = append(resp.OverLimitScopes, &cyclesv1.OverviewOverLimitScope{TenantId: r.tenant,
			Scope: r.scope, Unit: r.unit, Allocated: r.a, Remaining: r.b, Debt: r.debt})
	}
	for _, r := range top(debt) {
		resp.DebtScopes = append(resp.DebtScopes, &cyclesv1.OverviewDebtScope{TenantId: r.tenant,
			Scope: r.scope, Unit: r.unit, Debt: r.debt, OverdraftLimit: r.a})
	}
	for _, r := range denials {
		resp.RecentDenials = append(resp.RecentDenials, events.EventOfEntry(r.tenant, r.e.ID, r.e.F))
	}
	for _, r := range expiries {
		resp.RecentExpiries = append(resp.RecentExpiries, events.EventOfEntry(r.tenant, r.e.ID, r.e.F))
	}
	return resp, nil
}

// tenant runs one tenant's script with the budgets and events left.
func (s *Service) tenant(ctx context.Context, t string, budgets, evs int, denAfter, expAfter string) (part, error) {
	tk := keys.Tenant(t)
	var p part
	err := scriptTenant.RunInto(ctx, s.exec, &p, tenantKeys{tk.Prefix(), tk.Record(), tk.Budgets(), tk.Events()},
		tenantArgs{s.opts.Window.Milliseconds(), min(max(budgets, 0), perScript), min(max(evs, 0), perScript), denAfter, expAfter})
	if err != nil {
		return part{}, fmt.Errorf("overview: read tenant %s: %w", t, err)
	}
	return p, nil
}

// row is one budget of a top list: a and b are allocated and remaining (over
// limit) or the overdraft limit (in debt).
type row struct {
	tenant, scope string
	unit          cyclesv1.Unit
	a, b, debt    int64
}

// add counts one tenant's part into resp and returns its top-list rows.
func add(resp *cyclesv1.GetOverviewResponse, t string, p part) (over, debt []row, err error) {
	tc := resp.TenantCounts
	switch p.Status {
	case "":
		// Registered but without a record (being created or removed):
		// nothing of it is counted.
		return nil, nil, nil
	case "ACTIVE":
		tc.Active++
	case "SUSPENDED":
		tc.Suspended++
	case "CLOSED":
		tc.Closed++
	}
	tc.Total++
	if p.Observe != "" && p.Observe != "ENFORCE" {
		tc.InObserveMode++
	}
	bc := resp.BudgetCounts
	bc.Total += p.Budgets
	bc.Active += p.ByStat["ACTIVE"]
	bc.Frozen += p.ByStat["FROZEN"]
	bc.Closed += p.ByStat["CLOSED"]
	bc.OverLimit += p.Over
	bc.WithDebt += p.Debt
	for u, n := range p.ByUnit {
		bc.ByUnit[u] += n
	}
	ec := resp.EventCounts
	ec.TotalRecent += p.Events
	for c, n := range p.Cats {
		ec.ByCategory[c] += n
	}
	for r, n := range p.Reasons {
		resp.RecentDenialsByReason[r] += n
	}
	resp.Coverage.BudgetsRead += p.Budgets
	resp.Coverage.EventsRead += p.Events
	for _, r := range p.OL {
		x, err := rowOf(t, r, 2, 3, 4)
		if err != nil {
			return nil, nil, err
		}
		over = append(over, x)
	}
	for _, r := range p.DS {
		x, err := rowOf(t, r, 3, -1, 2)
		if err != nil {
			return nil, nil, err
		}
		debt = append(debt, x)
	}
	return over, debt, nil
}

// rowOf decodes a script row [scope, unit, ...] whose amounts are at
// indexes a, b (-1: none) and debt.
func rowOf(t string, r []string, a, b, debt int) (row, error) {
	if len(r) < 5 && b >= 0 || len(r) < 4 {
		return row{}, apierr.New(apierr.InternalError, "overview: malformed budget row of tenant %s: %v", t, r)
	}
	x := row{tenant: t, scope: r[0], unit: scope.ParseUnit(r[1])}
	var err error
	num := func(i int) int64 {
		if i < 0 || err != nil {
			return 0
		}
		var n int64
		n, err = strconv.ParseInt(r[i], 10, 64)
		return n
	}
	x.a, x.b, x.debt = num(a), num(b), num(debt)
	if err != nil {
		return row{}, apierr.New(apierr.InternalError, "overview: budget %s|%s of tenant %s has a malformed amount: %v", r[0], r[1], t, err)
	}
	return x, nil
}

// top is rows by debt, largest first (then tenant, scope, unit, so equal
// debts list in a stable order), at most topN.
func top(rows []row) []row {
	slices.SortFunc(rows, func(x, y row) int {
		return cmp.Or(cmp.Compare(y.debt, x.debt), cmp.Compare(x.tenant, y.tenant), cmp.Compare(x.scope, y.scope),
			cmp.Compare(x.unit, y.unit))
	})
	return rows[:min(len(rows), topN)]
}

// recent is one stream entry of a tenant's log, kept as read: only the
// topN newest of the whole walk become events.
type recent struct {
	tenant string
	ms     int64
	seq    int64
	e      entry
}

// floor is the stream id an entry must be newer than to enter kept: its
// oldest once it is full, else none ("").
func floor(kept []recent) string {
	if len(kept) < topN {
		return ""
	}
	return kept[len(kept)-1].e.ID
}

// keepNewest merges tenant t's entries (each log's newest first) into kept
// and keeps the topN newest by stream id (Redis TIME), the newest first.
func keepNewest(kept []recent, t string, es []entry) []recent {
	for _, e := range es {
		r := recent{tenant: t, e: e}
		ms, seq, _ := strings.Cut(e.ID, "-")
		r.ms, _ = strconv.ParseInt(ms, 10, 64)
		r.seq, _ = strconv.ParseInt(seq, 10, 64)
		kept = append(kept, r)
	}
	slices.SortStableFunc(kept, func(x, y recent) int {
		return cmp.Or(cmp.Compare(y.ms, x.ms), cmp.Compare(y.seq, x.seq), cmp.Compare(x.tenant, y.tenant))
	})
	return kept[:min(len(kept), topN)]
}
