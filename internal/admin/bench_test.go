package admin

import (
	"context"
	"fmt"
	"testing"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
)

// BenchmarkVerifyAPIKey compares the cached hot path with a Redis round trip.
func BenchmarkVerifyAPIKey(b *testing.B) {
	for _, tc := range []struct {
		name string
		ttl  func(*Options)
	}{
		{"cached", func(o *Options) {}},
		{"uncached", func(o *Options) { o.KeyCacheTTL = -1 }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			e := newEnv(b, tc.ttl)
			id := e.createTenant()
			secret := e.createKey(id).GetSecret()
			ctx := context.Background()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := e.svc.VerifyAPIKey(ctx, secret); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkFundBudget measures one funding script call (a fresh key each time).
func BenchmarkFundBudget(b *testing.B) {
	e := newEnv(b)
	id := e.createTenant()
	sp := scopeOf(id, "")
	e.createBudget(id, "", tokens, 0)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		req := &cyclesv1.FundBudgetRequest{TenantId: id, ScopePath: sp, Unit: tokens,
			Operation: cyclesv1.FundingOperation_FUNDING_OPERATION_CREDIT, Amount: 1, IdempotencyKey: fmt.Sprintf("b-%d", i)}
		if _, err := e.svc.FundBudget(e.ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}
