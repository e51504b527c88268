package opsapi

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/ledgerops"
	"github.com/cyclesgo/cycles-go/internal/sweeper"
	"github.com/cyclesgo/cycles-go/test/redistest"
	"github.com/cyclesgo/cycles-go/test/scripttest"
)

// seed registers a tenant with n due reservations of 10 TOKENS on one budget.
func seed(t *testing.T, c *redis.Client, tenant string, n int) {
	t.Helper()
	ctx := context.Background()
	k := keys.Tenant(tenant)
	now := time.Now().UnixMilli()
	scope := "tenant:" + tenant
	c.ZAdd(ctx, keys.Tenants, redis.Z{Member: tenant})
	c.HSet(ctx, k.Budget(scope, "TOKENS"), "scope_path", scope, "unit", "TOKENS",
		keys.BalanceField, keys.Balance{Status: "ACTIVE", Allocated: 1000, Reserved: int64(10 * n), Remaining: int64(1000 - 10*n)}.Pack())
	for i := 0; i < n; i++ {
		id := "r" + strconv.Itoa(i)
		c.HSet(ctx, k.Reservation(id), "state", "ACTIVE", "unit", "TOKENS",
			"estimate", "10", "scope_path", scope, "budgeted", `["`+scope+`"]`, "created_at", strconv.FormatInt(now-9000, 10),
			"expires_at", strconv.FormatInt(now-6000, 10), "grace_ms", "1000", "ext_count", "0")
		c.ZAdd(ctx, k.Deadlines(), redis.Z{Score: float64(now - 5000), Member: id})
	}
}

func TestTriggerAndStatus(t *testing.T) {
	c := redistest.Start(t).Client(t)
	ex := scripttest.On(t, c)
	sw := sweeper.New(ex, sweeper.Options{Interval: 7 * time.Second, BatchSize: 2})
	h := New(sw, ledgerops.New(ex, ledgerops.Options{}))

	st, err := h.GetSweeperStatus(context.Background(), &cyclesv1.GetSweeperStatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetEnabled() || st.GetIntervalMs() != 7000 || st.GetBatchSize() != 2 || st.GetLastRunStartedMs() != 0 {
		t.Fatalf("initial status %v", st)
	}

	seed(t, c, "ops-a", 5)
	// An RPC deadline shorter than the sweep does not cut it short.
	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	resp, err := h.TriggerSweep(ctx, &cyclesv1.TriggerSweepRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetCounts().GetExpired() != 5 {
		t.Fatalf("trigger %v", resp)
	}
	st, err = h.GetSweeperStatus(context.Background(), &cyclesv1.GetSweeperStatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetTotals().GetExpired() != 5 || st.GetLastRun().GetExpired() != 5 || st.GetBacklog() != 5 || st.GetLastRunStartedMs() == 0 {
		t.Fatalf("status after trigger %v", st)
	}
	if n := c.ZCard(context.Background(), keys.Tenant("ops-a").Deadlines()).Val(); n != 0 {
		t.Fatalf("%d left due", n)
	}
}
