package cycleshttp

import (
	"testing"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/test/errtest"
)

// TestDeclarationsNamingNoFieldPanic: a shape member, a nested shape's
// member or a route parameter naming no field of its message is a
// programming error, found when the table is built (every test builds it).
func TestDeclarationsNamingNoFieldPanic(t *testing.T) {
	for name, declare := range map[string]func(){
		"query parameter": func() {
			md := cyclesv1.File_cycles_v1_usage_proto.Services().ByName("UsageService").Methods().ByName("QueryUsage")
			newRoute(&API{shapes: answerShapes()}, "/x", md, &cyclesv1.HttpRoute{Pattern: "GET /x", Query: []string{"nope"}}, wire{})
		},
	} {
		t.Run(name, func(t *testing.T) {
			errtest.Panics(t, "no panic for a declaration that names no field", declare)
		})
	}
}

// TestOverviewShapeBytes: the overview written from its shape and its
// members' default shapes, byte for byte as the hand-written types it
// replaced wrote it (empty and full; exact int64, sorted maps, HTML-safe
// escapes, the constant webhook members).
func TestOverviewShapeBytes(t *testing.T) {
	shapes := answerShapes()
	shapes.Prepare((&cyclesv1.GetOverviewResponse{}).ProtoReflect().Descriptor())
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
		if got := string(shapes.Write(nil, tc.in.ProtoReflect())); got != tc.want {
			t.Errorf("got  %s\nwant %s", got, tc.want)
		}
	}
}
