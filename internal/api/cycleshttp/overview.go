package cycleshttp

import (
	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
)

// GET /v1/admin/overview (AdminOverviewResponse) over
// OverviewService.GetOverview. cyclesd keeps no webhook subscriptions
// (webhooks.go), so the webhook parts are zeros and empty lists. The
// extension field coverage says how much the bounded walk read
// (docs/protocol.md#admin-overview).

func (a *API) overviewRoutes() []endpoint {
	return []endpoint{
		on(a, "GET /v1/admin/overview", cyclesv1.OverviewService_GetOverview_FullMethodName,
			via(a.ov, cyclesv1.OverviewServiceServer.GetOverview), nil, overviewOf,
			off("the admin overview is not enabled on this server")),
	}
}

type tenantCountsOut struct {
	Total         int64 `json:"total"`
	Active        int64 `json:"active"`
	Suspended     int64 `json:"suspended"`
	Closed        int64 `json:"closed"`
	InObserveMode int64 `json:"in_observe_mode"`
}

type budgetCountsOut struct {
	Total     int64            `json:"total"`
	Active    int64            `json:"active"`
	Frozen    int64            `json:"frozen"`
	Closed    int64            `json:"closed"`
	OverLimit int64            `json:"over_limit"`
	WithDebt  int64            `json:"with_debt"`
	ByUnit    map[string]int64 `json:"by_unit"`
}

type overLimitScopeOut struct {
	Scope     string `json:"scope"`
	Unit      string `json:"unit"`
	Allocated int64  `json:"allocated"`
	Remaining int64  `json:"remaining"`
	Debt      int64  `json:"debt"`
}

type debtScopeOut struct {
	Scope          string `json:"scope"`
	Unit           string `json:"unit"`
	Debt           int64  `json:"debt"`
	OverdraftLimit int64  `json:"overdraft_limit"`
}

type webhookCountsOut struct {
	Total        int64 `json:"total"`
	Active       int64 `json:"active"`
	Disabled     int64 `json:"disabled"`
	WithFailures int64 `json:"with_failures"`
}

type eventCountsOut struct {
	TotalRecent int64            `json:"total_recent"`
	ByCategory  map[string]int64 `json:"by_category"`
}

type coverageOut struct {
	Capped            bool  `json:"capped"`
	TenantsRegistered int64 `json:"tenants_registered"`
	TenantsRead       int64 `json:"tenants_read"`
	BudgetsRead       int64 `json:"budgets_read"`
	EventsRead        int64 `json:"events_read"`
}

// overviewOut is the protocol's AdminOverviewResponse plus coverage.
type overviewOut struct {
	AsOf                  string              `json:"as_of"`
	EventWindowSeconds    int32               `json:"event_window_seconds"`
	TenantCounts          tenantCountsOut     `json:"tenant_counts"`
	BudgetCounts          budgetCountsOut     `json:"budget_counts"`
	OverLimitScopes       []overLimitScopeOut `json:"over_limit_scopes"`
	DebtScopes            []debtScopeOut      `json:"debt_scopes"`
	WebhookCounts         webhookCountsOut    `json:"webhook_counts"`
	FailingWebhooks       []struct{}          `json:"failing_webhooks"`
	EventCounts           eventCountsOut      `json:"event_counts"`
	RecentDenials         []eventEnvelopeOut  `json:"recent_denials"`
	RecentExpiries        []eventEnvelopeOut  `json:"recent_expiries"`
	RecentDenialsByReason map[string]int64    `json:"recent_denials_by_reason"`
	Coverage              coverageOut         `json:"coverage"`
}

func overviewOf(o *cyclesv1.GetOverviewResponse) *overviewOut {
	tc, bc, ec, cv := o.GetTenantCounts(), o.GetBudgetCounts(), o.GetEventCounts(), o.GetCoverage()
	out := &overviewOut{
		AsOf:               isoTime(o.GetAsOfMs()),
		EventWindowSeconds: o.GetEventWindowSeconds(),
		TenantCounts: tenantCountsOut{Total: tc.GetTotal(), Active: tc.GetActive(), Suspended: tc.GetSuspended(),
			Closed: tc.GetClosed(), InObserveMode: tc.GetInObserveMode()},
		BudgetCounts: budgetCountsOut{Total: bc.GetTotal(), Active: bc.GetActive(), Frozen: bc.GetFrozen(),
			Closed: bc.GetClosed(), OverLimit: bc.GetOverLimit(), WithDebt: bc.GetWithDebt(), ByUnit: map[string]int64{}},
		OverLimitScopes:       make([]overLimitScopeOut, 0, len(o.GetOverLimitScopes())),
		DebtScopes:            make([]debtScopeOut, 0, len(o.GetDebtScopes())),
		FailingWebhooks:       []struct{}{},
		EventCounts:           eventCountsOut{TotalRecent: ec.GetTotalRecent(), ByCategory: map[string]int64{}},
		RecentDenials:         make([]eventEnvelopeOut, 0, len(o.GetRecentDenials())),
		RecentExpiries:        make([]eventEnvelopeOut, 0, len(o.GetRecentExpiries())),
		RecentDenialsByReason: map[string]int64{},
		Coverage: coverageOut{Capped: cv.GetCapped(), TenantsRegistered: cv.GetTenantsRegistered(),
			TenantsRead: cv.GetTenantsRead(), BudgetsRead: cv.GetBudgetsRead(), EventsRead: cv.GetEventsRead()},
	}
	for u, n := range bc.GetByUnit() {
		out.BudgetCounts.ByUnit[u] = n
	}
	for c, n := range ec.GetByCategory() {
		out.EventCounts.ByCategory[c] = n
	}
	for r, n := range o.GetRecentDenialsByReason() {
		out.RecentDenialsByReason[r] = n
	}
	for _, s := range o.GetOverLimitScopes() {
		out.OverLimitScopes = append(out.OverLimitScopes, overLimitScopeOut{Scope: s.GetScope(), Unit: unitName(s.GetUnit()),
			Allocated: s.GetAllocated(), Remaining: s.GetRemaining(), Debt: s.GetDebt()})
	}
	for _, s := range o.GetDebtScopes() {
		out.DebtScopes = append(out.DebtScopes, debtScopeOut{Scope: s.GetScope(), Unit: unitName(s.GetUnit()),
			Debt: s.GetDebt(), OverdraftLimit: s.GetOverdraftLimit()})
	}
	for _, e := range o.GetRecentDenials() {
		out.RecentDenials = append(out.RecentDenials, envelopeOf(e))
	}
	for _, e := range o.GetRecentExpiries() {
		out.RecentExpiries = append(out.RecentExpiries, envelopeOf(e))
	}
	return out
}
