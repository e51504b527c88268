package cycleshttp

// GET /v1/admin/overview (AdminOverviewResponse) over
// OverviewService.GetOverview. cyclesd keeps no webhook subscriptions
// (webhooks.go), so the webhook parts are zeros and empty lists. The
// extension field coverage says how much the bounded walk read
// (docs/protocol.md#admin-overview).

// overviewShape is the protocol's AdminOverviewResponse plus coverage: the
// proto's shape, with the webhook members cyclesd never has as constants.
var overviewShape = shapeOf("as_of", "event_window_seconds", "tenant_counts", "budget_counts", "over_limit_scopes",
	"debt_scopes", "webhook_counts", "failing_webhooks", "event_counts", "recent_denials", "recent_expiries",
	"recent_denials_by_reason", "coverage").
	nest("tenant_counts", shapeOf("total", "active", "suspended", "closed", "in_observe_mode")).
	nest("budget_counts", shapeOf("total", "active", "frozen", "closed", "over_limit", "with_debt", "by_unit")).
	nest("over_limit_scopes", shapeOf("scope", "unit", "allocated", "remaining", "debt")).
	nest("debt_scopes", shapeOf("scope", "unit", "debt", "overdraft_limit")).
	fixed("webhook_counts", `{"total":0,"active":0,"disabled":0,"with_failures":0}`).
	fixed("failing_webhooks", `[]`).
	nest("event_counts", shapeOf("total_recent", "by_category")).
	nest("recent_denials", envelopeShape).
	nest("recent_expiries", envelopeShape).
	nest("coverage", shapeOf("capped", "tenants_registered", "tenants_read", "budgets_read", "events_read"))
