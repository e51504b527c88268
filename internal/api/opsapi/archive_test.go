package opsapi_test

import (
	"context"
	"testing"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/ledgerops"
	"github.com/cyclesgo/cycles-go/test/grpctest"
	"github.com/cyclesgo/cycles-go/test/redistest"
)

// TestOpsWithArchive: with an archive configured, a quarantined reservation
// an operator releases joins the archive queue without a TTL (as every
// settled record does), and a settled record without a TTL is not a
// finding, so no repair gives it one before it is archived.
func TestOpsWithArchive(t *testing.T) {
	e := newEnvWith(t, redistest.SharedClient(t), ledgerops.Options{AuditRate: 1000, Archive: true})
	ctx := context.Background()
	tk := keys.Tenant(e.tenant)
	q := e.quarantined("q", 9, func(id string) { e.redis("HSET", tk.Reservation(id), "estimate", "x") })
	if _, err := e.ops.ResolveQuarantined(admin(), releaseReq(e, q, e.ws("q"), 9)); err != nil {
		t.Fatal(err)
	}
	if ttl := e.c.PTTL(ctx, tk.Reservation(q)).Val(); ttl != -1 {
		t.Fatalf("resolved record PTTL %v, want none until archived", ttl)
	}
	queue := e.c.XRange(ctx, tk.ArchiveQueue(), "-", "+").Val()
	if len(queue) != 1 || queue[0].Values["id"] != q {
		t.Fatalf("archive queue %v, want %s", queue, q)
	}
	e.budget("c")
	settled := e.reserve("c", 5)
	if _, err := e.rt.ReleaseReservation(grpctest.AsTenant(ctx, e.tenant), &cyclesv1.ReleaseReservationRequest{ReservationId: settled, IdempotencyKey: "rel"}); err != nil {
		t.Fatal(err)
	}
	e.redis("PERSIST", tk.Reservation(settled))
	if got := e.audit().GetDiscrepancies(); len(got) != 0 {
		t.Fatalf("audit with an archive: %v", discrepancies(got))
	}
	rep, err := e.ops.RepairTenant(admin(), &cyclesv1.RepairTenantRequest{TenantId: e.tenant, Apply: true, IdempotencyKey: "r1"})
	if err != nil || len(rep.GetChanges()) != 0 {
		t.Fatalf("repair %v %v", rep, err)
	}
	if ttl := e.c.PTTL(ctx, tk.Reservation(settled)).Val(); ttl != -1 {
		t.Fatalf("repair gave a record awaiting the archive PTTL %v", ttl)
	}
}
