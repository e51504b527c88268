package ledgertest

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cyclesgo/cycles-go/internal/keys"
)

// ScopePath is the canonical scope path rest below tenant's root
// ("tenant:<id>" for rest "", else "tenant:<id>/<rest>"), the path tests
// seed and name budgets by.
func ScopePath(tenant, rest string) string {
	if rest == "" {
		return "tenant:" + tenant
	}
	return "tenant:" + tenant + "/" + rest
}

// Backdate moves reservation rid's expiry ago into the past by Redis' clock,
// with its sweeper index entry at that expiry plus grace, as the reserve
// script files it: a reservation past its expiry without waiting for it.
func Backdate(tb testing.TB, c redis.UniversalClient, tenant, rid string, ago, grace time.Duration) {
	tb.Helper()
	ctx := context.Background()
	now, err := c.Time(ctx).Result()
	if err != nil {
		tb.Fatalf("redis TIME: %v", err)
	}
	expires := now.Add(-ago).UnixMilli()
	tk := keys.Tenant(tenant)
	if err := c.HSet(ctx, tk.Reservation(rid), "expires_at", expires).Err(); err != nil {
		tb.Fatalf("backdate %s: %v", rid, err)
	}
	if err := c.ZAdd(ctx, tk.Deadlines(), redis.Z{Score: float64(expires + grace.Milliseconds()), Member: rid}).Err(); err != nil {
		tb.Fatalf("backdate %s deadline: %v", rid, err)
	}
}

// SeedBudgetAt seeds b at ScopePath(tenant, rest), in TOKENS unless b.Unit
// names another unit: the budget a test of one tenant's calls starts from.
func SeedBudgetAt(tb testing.TB, c redis.UniversalClient, tenant, rest string, b Budget) {
	tb.Helper()
	b.Scope = ScopePath(tenant, rest)
	if b.Unit == "" {
		b.Unit = "TOKENS"
	}
	SeedBudget(tb, c, tenant, b)
}
