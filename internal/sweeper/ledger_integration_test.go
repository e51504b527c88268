package sweeper_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/events"
	"github.com/cyclesgo/cycles-go/internal/ledger"
	"github.com/cyclesgo/cycles-go/internal/sweeper"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
	"github.com/cyclesgo/cycles-go/test/redistest"
	"github.com/cyclesgo/cycles-go/test/scripttest"
)

// End to end with the real ledger scripts: reservations made by Reserve expire
// through the sweeper; GetReservation answers RESERVATION_EXPIRED,
// ListReservations returns them as EXPIRED with expired_at, a commit that lost
// the race is refused, the event log holds one reservation.expired each, and
// the ledger invariants hold throughout (test/ledgertest).
func TestExpiryThroughTheLedger(t *testing.T) {
	c := redistest.Start(t).Client(t)
	ex := scripttest.On(t, c)
	ctx := context.Background()
	tenant := ledgertest.NewTenantID(t)
	ledgertest.SeedTenant(t, c, tenant, ledgertest.Tenant{})
	for _, s := range []string{"tenant:" + tenant, "tenant:" + tenant + "/workspace:prod"} {
		ledgertest.SeedBudget(t, c, tenant, ledgertest.Budget{Scope: s, Unit: "TOKENS", Allocated: 1_000_000})
	}
	l := ledger.New(ex, ledger.Options{})
	reserve := func(i int) string {
		ttl, grace := int64(1000), int64(0)
		r, err := l.Reserve(ctx, tenant, &cyclesv1.CreateReservationRequest{
			IdempotencyKey: fmt.Sprintf("k%d", i), Subject: &cyclesv1.Subject{Workspace: "prod"},
			Action:   &cyclesv1.Action{Kind: "llm.completion", Name: "m"},
			Estimate: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 1000 + int64(i)},
			TtlMs:    &ttl, GracePeriodMs: &grace,
		})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetReservationId()
	}
	var ids []string
	for i := 0; i < 5; i++ {
		ids = append(ids, reserve(i))
	}
	committed := reserve(99)
	if _, err := l.Commit(ctx, tenant, &cyclesv1.CommitReservationRequest{ReservationId: committed, IdempotencyKey: "c",
		Actual: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 10}}); err != nil {
		t.Fatal(err)
	}
	ledgertest.CheckInvariants(t, c, tenant)

	time.Sleep(1100 * time.Millisecond) // ttl 1 s, grace 0
	sw := sweeper.New(ex, sweeper.Options{})
	got, err := sw.SweepOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got.Expired != 5 {
		t.Fatalf("counts %+v, want 5 expired", got)
	}
	ledgertest.CheckInvariants(t, c, tenant)
	for _, s := range []string{"tenant:" + tenant, "tenant:" + tenant + "/workspace:prod"} {
		// Only the committed charge (10) remains; every hold was refunded.
		b := ledgertest.ReadBudget(t, c, tenant, s, "TOKENS")
		if b.Reserved.Sign() != 0 || b.Spent.Int64() != 10 || b.Remaining.Int64() != 1_000_000-10 {
			t.Fatalf("%s: %v", s, b)
		}
	}

	for _, id := range ids {
		_, err := l.Get(ctx, tenant, &cyclesv1.GetReservationRequest{ReservationId: id})
		if ae, ok := apierr.As(err); !ok || ae.Code != apierr.ReservationExpired || ae.Code.GRPCCode() != codes.FailedPrecondition {
			t.Fatalf("Get %s: %v, want RESERVATION_EXPIRED", id, err)
		}
		_, err = l.Commit(ctx, tenant, &cyclesv1.CommitReservationRequest{ReservationId: id, IdempotencyKey: "late",
			Actual: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 1}})
		if !apierr.HasCode(err, apierr.ReservationExpired) {
			t.Fatalf("commit after expiry: %v", err)
		}
	}
	list, err := l.List(ctx, tenant, &cyclesv1.ListReservationsRequest{Status: cyclesv1.ReservationStatus_RESERVATION_STATUS_EXPIRED, Workspace: "prod", Limit: 50})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.GetReservations()) != 5 {
		t.Fatalf("ListReservations EXPIRED: %d rows", len(list.GetReservations()))
	}
	for _, r := range list.GetReservations() {
		if r.GetStatus() != cyclesv1.ReservationStatus_RESERVATION_STATUS_EXPIRED || r.GetExpiredAtMs() == 0 || r.GetReserved().GetAmount() < 1000 {
			t.Fatalf("row %v", r)
		}
	}

	evs, err := events.New(ex, events.Options{}).List(ctx, auth.Principal{Tenant: tenant}, &cyclesv1.ListEventsRequest{
		EventTypes: []string{"reservation.expired"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs.GetEvents()) != 5 {
		t.Fatalf("%d reservation.expired events", len(evs.GetEvents()))
	}
	for _, e := range evs.GetEvents() {
		d := e.GetData().GetFields()
		if d["unit"].GetStringValue() != "TOKENS" || d["estimated_amount"].GetStringValue() == "" || d["ttl_ms"].GetNumberValue() != 1000 ||
			e.GetScope() != "tenant:"+tenant+"/workspace:prod" || e.GetActor().GetType() != "system" || len(e.GetTraceId()) != 32 {
			t.Fatalf("event %v", e)
		}
	}
}
