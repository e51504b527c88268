package ledger_test

import (
	"strconv"
	"testing"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/ledger"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
	"github.com/cyclesgo/cycles-go/test/redistest"
	"github.com/cyclesgo/cycles-go/test/scripttest"
)

func benchLedger(b *testing.B) (*ledger.Ledger, string) {
	c := redistest.SharedClient(b)
	ex := scripttest.On(b, c)
	tenant := ledgertest.NewTenantID(b)
	for _, p := range []string{"", "/workspace:prod"} {
		ledgertest.SeedBudget(b, c, tenant, ledgertest.Budget{Scope: "tenant:" + tenant + p, Unit: "TOKENS", Allocated: 1 << 60})
	}
	b.Cleanup(func() { ledgertest.CheckInvariants(b, c, tenant) })
	return ledger.New(ex, ledger.Options{}), tenant
}

// One reserve + commit round trip (two scopes, real redis-server).
func BenchmarkReserveCommit(b *testing.B) {
	l, tenant := benchLedger(b)
	subj := &cyclesv1.Subject{Workspace: "prod"}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := strconv.Itoa(i)
		r, err := l.Reserve(ctx, tenant, reserveReq("r"+k, subj, 100))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := l.Commit(ctx, tenant, &cyclesv1.CommitReservationRequest{ReservationId: r.ReservationId, IdempotencyKey: "c", Actual: tokens(90)}); err != nil {
			b.Fatal(err)
		}
	}
}

// Parallel reserves on one shared budget (the contended case).
func BenchmarkReserveParallel(b *testing.B) {
	l, tenant := benchLedger(b)
	subj := &cyclesv1.Subject{Workspace: "prod"}
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := l.Reserve(ctx, tenant, reserveReq(ledgertest.NewTenantID(b), subj, 1)); err != nil {
				b.Fatal(err)
			}
		}
	})
}
