package cycleshttp

import (
	"math"
	"testing"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
)

// TestShapeWireRules: each rule the generic encoder declares once, on the
// exact bytes it writes.
func TestShapeWireRules(t *testing.T) {
	row := shapeOf("bucket_start", "scope", "unit", "reserved")
	audit := page("logs", nil).nest("logs", shapeOf("log_id", "timestamp", "key_id?", "status", "metadata?"))
	keys := page("keys=api_keys", item(func(k *cyclesv1.ApiKey) string { return "k:" + k.GetKeyId() }))
	for _, tc := range []struct {
		name string
		got  func() string
		want string
	}{
		{"int64 exact, enum without prefix, ms as ISO", func() string {
			return string(shaped[*cyclesv1.UsageRow](row)(&cyclesv1.UsageRow{BucketStartMs: 1767225600123, Scope: "tenant:a",
				Unit: cyclesv1.Unit_UNIT_USD_MICROCENTS, Reserved: math.MaxInt64}))
		}, `{"bucket_start":"2026-01-01T00:00:00.123Z","scope":"tenant:a","unit":"USD_MICROCENTS","reserved":9223372036854775807}`},
		{"zero values written unless omitted; unset time is empty", func() string {
			return string(shaped[*cyclesv1.UsageRow](row)(&cyclesv1.UsageRow{}))
		}, `{"bucket_start":"","scope":"","unit":"","reserved":0}`},
		{"empty list is [], omitted members and next_cursor dropped", func() string {
			return string(shaped[*cyclesv1.ListAuditLogsResponse](audit)(&cyclesv1.ListAuditLogsResponse{}))
		}, `{"logs":[],"has_more":false}`},
		{"nested shape, sorted map, HTML-safe escapes as encoding/json", func() string {
			return string(shaped[*cyclesv1.ListAuditLogsResponse](audit)(&cyclesv1.ListAuditLogsResponse{NextCursor: "c", HasMore: true,
				Logs: []*cyclesv1.AuditLogEntry{{LogId: "<l&>", Status: 200, Metadata: map[string]string{"b": "2", "a": "1"}}}}))
		}, `{"logs":[{"log_id":"\u003cl\u0026\u003e","timestamp":"","status":200,"metadata":{"a":"1","b":"2"}}],"next_cursor":"c","has_more":true}`},
		{"renamed member with a hand-written item", func() string {
			return string(shaped[*cyclesv1.ListApiKeysResponse](keys)(&cyclesv1.ListApiKeysResponse{ApiKeys: []*cyclesv1.ApiKey{{KeyId: "x"}}}))
		}, `{"keys":["k:x"],"has_more":false}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.got(); got != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

// TestDeclarationsNamingNoFieldPanic: a shape member, a nested shape's
// member or a route parameter naming no field of its message is a
// programming error, found when the table is built (every test builds it).
func TestDeclarationsNamingNoFieldPanic(t *testing.T) {
	for name, declare := range map[string]func(){
		"shape member": func() { shaped[*cyclesv1.UsageRow](shapeOf("nope")) },
		"nested member": func() {
			shaped[*cyclesv1.ListAuditLogsResponse](page("logs", nil).nest("logs", shapeOf("nope")))
		},
		"query parameter": func() {
			md := cyclesv1.File_cycles_v1_usage_proto.Services().ByName("UsageService").Methods().ByName("QueryUsage")
			newRoute(&API{}, "/x", md, &cyclesv1.HttpRoute{Pattern: "GET /x", Query: []string{"nope"}}, wire{}, service{})
		},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic for a declaration that names no field")
				}
			}()
			declare()
		})
	}
}

// TestOverviewShapeBytes: the overview written from its shape, byte for
// byte as the hand-written types it replaced wrote it (empty and full;
// exact int64, sorted maps, HTML-safe escapes, the constant webhook members).
func TestOverviewShapeBytes(t *testing.T) {
	for _, tc := range []struct {
		in   *cyclesv1.GetOverviewResponse
		want string
	}{
		{&cyclesv1.GetOverviewResponse{}, `{"as_of":"","event_window_seconds":0,"tenant_counts":{"total":0,"active":0,"suspended":0,"closed":0,"in_observe_mode":0},"budget_counts":{"total":0,"active":0,"frozen":0,"closed":0,"over_limit":0,"with_debt":0,"by_unit":{}},"over_limit_scopes":[],"debt_scopes":[],"webhook_counts":{"total":0,"active":0,"disabled":0,"with_failures":0},"failing_webhooks":[],"event_counts":{"total_recent":0,"by_category":{}},"recent_denials":[],"recent_expiries":[],"recent_denials_by_reason":{},"coverage":{"capped":false,"tenants_registered":0,"tenants_read":0,"budgets_read":0,"events_read":0}}`},
		{&cyclesv1.GetOverviewResponse{AsOfMs: 1767225600123, EventWindowSeconds: 3600,
			TenantCounts:          &cyclesv1.OverviewTenantCounts{Total: 3, Active: 2, Closed: 1, InObserveMode: 1},
			BudgetCounts:          &cyclesv1.OverviewBudgetCounts{Total: 9223372036854775807, ByUnit: map[string]int64{"TOKENS": 2, "CREDITS": 1}},
			OverLimitScopes:       []*cyclesv1.OverviewOverLimitScope{{TenantId: "t", Scope: "tenant:t", Unit: cyclesv1.Unit_UNIT_TOKENS, Allocated: 5, Remaining: -1, Debt: 3}},
			DebtScopes:            []*cyclesv1.OverviewDebtScope{{TenantId: "t", Scope: "tenant:t/<a&b>", Unit: cyclesv1.Unit_UNIT_CREDITS, Debt: 3, OverdraftLimit: 10}},
			EventCounts:           &cyclesv1.OverviewEventCounts{TotalRecent: 7, ByCategory: map[string]int64{"reservation": 5, "budget": 2}},
			RecentDenials:         []*cyclesv1.Event{{EventId: "e1", EventType: "reservation.denied", TenantId: "t", TimestampMs: 1767225600000}},
			RecentExpiries:        []*cyclesv1.Event{{EventId: "e2", EventType: "reservation.expired", TenantId: "t", Actor: &cyclesv1.Actor{Type: "system"}}},
			RecentDenialsByReason: map[string]int64{"BUDGET_EXCEEDED": 1},
			Coverage:              &cyclesv1.OverviewCoverage{Capped: true, TenantsRegistered: 3, TenantsRead: 3, BudgetsRead: 4, EventsRead: 7}}, `{"as_of":"2026-01-01T00:00:00.123Z","event_window_seconds":3600,"tenant_counts":{"total":3,"active":2,"suspended":0,"closed":1,"in_observe_mode":1},"budget_counts":{"total":9223372036854775807,"active":0,"frozen":0,"closed":0,"over_limit":0,"with_debt":0,"by_unit":{"CREDITS":1,"TOKENS":2}},"over_limit_scopes":[{"scope":"tenant:t","unit":"TOKENS","allocated":5,"remaining":-1,"debt":3}],"debt_scopes":[{"scope":"tenant:t/\u003ca\u0026b\u003e","unit":"CREDITS","debt":3,"overdraft_limit":10}],"webhook_counts":{"total":0,"active":0,"disabled":0,"with_failures":0},"failing_webhooks":[],"event_counts":{"total_recent":7,"by_category":{"budget":2,"reservation":5}},"recent_denials":[{"event_id":"e1","event_type":"reservation.denied","category":"","timestamp":"2026-01-01T00:00:00.000Z","tenant_id":"t","source":""}],"recent_expiries":[{"event_id":"e2","event_type":"reservation.expired","category":"","timestamp":"","tenant_id":"t","actor":{"type":"system"},"source":""}],"recent_denials_by_reason":{"BUDGET_EXCEEDED":1},"coverage":{"capped":true,"tenants_registered":3,"tenants_read":3,"budgets_read":4,"events_read":7}}`},
	} {
		if got := string(shaped[*cyclesv1.GetOverviewResponse](overviewShape)(tc.in)); got != tc.want {
			t.Errorf("got  %s\nwant %s", got, tc.want)
		}
	}
}
