package overview_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/overview"
	"github.com/cyclesgo/cycles-go/test/redistest"
	"github.com/cyclesgo/cycles-go/test/scripttest"
)

// BenchmarkOverview is one snapshot of a deployment at the tenant bound:
// 1,000 tenants with 10 budgets and 10 events of the window each (10,000
// budgets, 10,000 events: every bound reached, nothing capped). Figures:
// BENCHMARKS.md, "Admin overview".
func BenchmarkOverview(b *testing.B) {
	c := redistest.Start(b).Client(b)
	ctx := context.Background()
	pipe := c.Pipeline()
	for i := range 1000 {
		t := fmt.Sprintf("bench-%04d", i)
		tk := keys.Tenant(t)
		pipe.HSet(ctx, tk.Record(), "tenant_id", t, "status", "ACTIVE")
		pipe.ZAdd(ctx, keys.Tenants, redis.Z{Member: t})
		for j := range 10 {
			scope := fmt.Sprintf("tenant:%s/app:a%d", t, j)
			pipe.HSet(ctx, tk.Budget(scope, "TOKENS"), "scope_path", scope, "unit", "TOKENS",
				keys.BalanceField, keys.Balance{Status: "ACTIVE", Allocated: 100, Remaining: 90}.Pack())
			pipe.ZAdd(ctx, tk.Budgets(), redis.Z{Member: keys.BudgetMember(scope, "TOKENS")})
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: tk.Events(), Values: []string{"id", "evt_x", "type", "reservation.denied",
				"cat", "reservation", "ts", "1", "data", `{"reason_code":"BUDGET_EXCEEDED"}`}})
		}
		if i%100 == 99 {
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	ex := scripttest.On(b, c)
	svc := overview.New(ex, overview.Options{})
	b.ResetTimer()
	for b.Loop() {
		o, err := svc.Get(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if o.GetCoverage().GetCapped() || o.GetBudgetCounts().GetTotal() != 10000 || o.GetEventCounts().GetTotalRecent() != 10000 {
			b.Fatalf("snapshot %v", o.GetCoverage())
		}
	}
}
