package ledgertest_test

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
	"github.com/cyclesgo/cycles-go/test/redistest"
)

// The checker must catch each invariant it claims to check.
func TestViolationsCatchEachInvariant(t *testing.T) {
	ctx := context.Background()
	c := redistest.SharedClient(t)
	// seed builds a sound tenant: one budget holding one ACTIVE reservation.
	seed := func(t *testing.T) (string, keys.Tenant, string) {
		tenant := ledgertest.NewTenantID(t)
		tk := keys.Tenant(tenant)
		path := "tenant:" + tenant
		ledgertest.SeedBudget(t, c, tenant, ledgertest.Budget{Scope: path, Unit: "TOKENS", Allocated: 1000, Reserved: 100})
		c.HSet(ctx, tk.Reservation("r1"), "state", "ACTIVE", "unit", "TOKENS", "estimate", "100",
			"budgeted", `["`+path+`"]`, "expires_at", "5000", "grace_ms", "100")
		c.ZAdd(ctx, tk.Deadlines(), redis.Z{Score: 5100, Member: "r1"})
		return tenant, tk, path
	}
	t.Run("sound", func(t *testing.T) {
		tenant, _, _ := seed(t)
		if v := ledgertest.Violations(ctx, c, tenant); len(v) != 0 {
			t.Fatalf("a sound ledger reported %v", v)
		}
	})
	cases := []struct {
		name   string
		break_ func(tk keys.Tenant, path string)
		want   string
	}{
		{"remaining off by one", func(tk keys.Tenant, path string) {
			ledgertest.AddToBalance(t, c, tk.Budget(path, "TOKENS"), map[string]int64{"remaining": 1})
		}, "remaining"},
		{"reserved negative", func(tk keys.Tenant, path string) {
			ledgertest.PatchBalance(t, c, tk.Budget(path, "TOKENS"), map[string]string{"reserved": "-5", "remaining": "1005"})
		}, "reserved -5 < 0"},
		{"ACTIVE not indexed", func(tk keys.Tenant, path string) { c.ZRem(ctx, tk.Deadlines(), "r1") }, "not in the deadline index"},
		{"wrong deadline score", func(tk keys.Tenant, path string) { c.ZAdd(ctx, tk.Deadlines(), redis.Z{Score: 5000, Member: "r1"}) }, "deadline score"},
		{"index entry without ACTIVE record", func(tk keys.Tenant, path string) { c.ZAdd(ctx, tk.Deadlines(), redis.Z{Score: 1, Member: "ghost"}) }, "not an ACTIVE reservation"},
		{"a field the layout does not list", func(tk keys.Tenant, path string) { c.HSet(ctx, tk.Reservation("r1"), "id", "r1") },
			`holds field "id"`},
		{"estimates do not sum to reserved", func(tk keys.Tenant, path string) { c.HSet(ctx, tk.Reservation("r1"), "estimate", "99") }, "sum of ACTIVE estimates"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tenant, tk, path := seed(t)
			tc.break_(tk, path)
			v := ledgertest.Violations(ctx, c, tenant)
			if !strings.Contains(strings.Join(v, "\n"), tc.want) {
				t.Fatalf("violations %v do not mention %q", v, tc.want)
			}
		})
	}
}
