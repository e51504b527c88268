package cycleshttp_test

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
)

// TestOverviewAccess: GET /v1/admin/overview and OverviewService.GetOverview
// answer the admin key only (AdminKeyAuth in the spec); a tenant key holding
// every admin permission is refused on both wires, as is a call without a
// key. The admin's answer counts the tenant this test made.
func TestOverviewAccess(t *testing.T) {
	k := newKeysEnv(t)
	strong, _ := k.key(`,"permissions":["admin:read","admin:write","budgets:read","events:read"]`)
	ov := cyclesv1.NewOverviewServiceClient(k.conn)
	for _, c := range []struct {
		name   string
		header []string
		status int
		code   codes.Code
	}{
		{"admin key", k.as, 200, codes.OK},
		{"tenant key with admin permissions", []string{"X-Cycles-API-Key", strong}, 401, codes.Unauthenticated},
		{"no key", nil, 401, codes.Unauthenticated},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := k.call("GET", "/v1/admin/overview", "", "", c.header...)
			if r.status != c.status {
				t.Fatalf("HTTP: %d %s", r.status, r.body)
			}
			ctx := t.Context()
			switch {
			case c.name == "admin key":
				ctx = adminCtx()
			case c.header != nil:
				ctx = keyCtx(strong)
			}
			resp, err := ov.GetOverview(ctx, &cyclesv1.GetOverviewRequest{})
			if status.Code(err) != c.code {
				t.Fatalf("gRPC: %v, want %s", err, c.code)
			}
			if c.status != 200 {
				return
			}
			m := r.obj(t)
			tc, _ := m["tenant_counts"].(map[string]any)
			if tc == nil || m["event_window_seconds"] == nil || m["coverage"] == nil {
				t.Fatalf("HTTP body: %s", r.body)
			}
			cov := resp.GetCoverage()
			if resp.GetTenantCounts().GetTotal() < 1 || cov.GetTenantsRegistered() < 1 ||
				(!cov.GetCapped() && (resp.GetBudgetCounts().GetTotal() < 1 || resp.GetBudgetCounts().GetByUnit()["TOKENS"] < 1)) {
				t.Fatalf("gRPC answer counts nothing of this test's tenant: %v", resp)
			}
		})
	}
}
