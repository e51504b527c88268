package ledger_test

import (
	"testing"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/ledger"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
	"github.com/cyclesgo/cycles-go/test/redistest"
	"github.com/cyclesgo/cycles-go/test/scripttest"
)

// Every ledger script runs on Redis Cluster: all keys of a call share the
// tenant's hash tag (declared in KEYS or derived from the tenant prefix), so
// tenants spread over the masters and each call stays in one slot.
func TestEveryScriptOnCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3).Client(t)
	ex := scripttest.On(t, cl)
	if err := ex.Load(ctx); err != nil {
		t.Fatal(err)
	}
	l := ledger.New(ex, ledger.Options{})
	for i := 0; i < 4; i++ { // several tenants: different slots, different masters
		tenant := ledgertest.NewTenantID(t)
		ledgertest.SeedTenant(t, cl, tenant, ledgertest.Tenant{})
		for _, p := range []string{"", "/workspace:prod"} {
			ledgertest.SeedBudget(t, cl, tenant, ledgertest.Budget{Scope: "tenant:" + tenant + p, Unit: "TOKENS", Allocated: 1000, OverdraftLimit: 100})
		}
		subj := &cyclesv1.Subject{Workspace: "prod"}
		must := func(_ any, err error) {
			t.Helper()
			if err != nil {
				t.Fatalf("tenant %s: %v", tenant, err)
			}
		}
		r, err := l.Reserve(ctx, tenant, reserveReq("a", subj, 100))
		must(r, err)
		must(l.Reserve(ctx, tenant, reserveReq("a", subj, 100))) // replay
		dry := reserveReq("d", subj, 10)
		dry.DryRun = true
		must(l.Reserve(ctx, tenant, dry))
		must(l.Decide(ctx, tenant, &cyclesv1.DecideRequest{IdempotencyKey: "d", Subject: subj, Action: action, Estimate: tokens(5000)}))
		must(l.Extend(ctx, tenant, &cyclesv1.ExtendReservationRequest{ReservationId: r.ReservationId, IdempotencyKey: "x", ExtendByMs: 100}))
		must(l.Commit(ctx, tenant, &cyclesv1.CommitReservationRequest{ReservationId: r.ReservationId, IdempotencyKey: "c", Actual: tokens(150)}))
		r2, err := l.Reserve(ctx, tenant, reserveReq("b", subj, 50))
		must(r2, err)
		must(l.Release(ctx, tenant, &cyclesv1.ReleaseReservationRequest{ReservationId: r2.ReservationId, IdempotencyKey: "r"}))
		must(l.CreateEvent(ctx, tenant, &cyclesv1.CreateEventRequest{IdempotencyKey: "e", Subject: subj, Action: action, Actual: tokens(800),
			OveragePolicy: cyclesv1.CommitOveragePolicy_COMMIT_OVERAGE_POLICY_ALLOW_WITH_OVERDRAFT}))
		must(l.Get(ctx, tenant, &cyclesv1.GetReservationRequest{ReservationId: r.ReservationId}))
		must(l.List(ctx, tenant, &cyclesv1.ListReservationsRequest{Workspace: "prod"}))
		must(l.Balances(ctx, tenant, &cyclesv1.GetBalancesRequest{Tenant: tenant}))
		_, err = l.Reserve(ctx, tenant, reserveReq("open", subj, 0))
		must(nil, err)
		ledgertest.SetTenantStatus(t, cl, tenant, "CLOSED")
		if n, more, err := l.ReleaseForTenantClose(ctx, tenant, 10); err != nil || n != 1 || more {
			t.Fatalf("close: %d %v %v", n, more, err)
		}
		ledgertest.CheckInvariants(t, cl, tenant)
	}
}
