package e2e

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/pkg/apierr"
	"github.com/cyclesgo/cycles-go/pkg/auth"
	"github.com/cyclesgo/cycles-go/test/redistest"
)

// TestFullRedis runs against a real noeviction Redis whose maxmemory is set
// just under its use: new holds are refused with RESOURCE_EXHAUSTED /
// STORE_FULL and change nothing, health turns NOT_SERVING, the refusals are
// counted, and commit, release and RevokeApiKey keep working (allow-oom), so
// budget held before Redis filled up can be settled and a leaked key cut off.
// Raising maxmemory brings everything back without a restart.
func TestFullRedis(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Args: []string{"--maxmemory-policy", "noeviction"}})
	d := startDaemon(t, []string{"CYCLESD_REDIS_ADDRS=" + srv.Addr, "CYCLESD_ADMIN_KEY=" + adminKey},
		"-health-interval", "100ms")
	d.waitServing(t)
	conn := d.conn(t)
	key := provision(t, conn, "full", 1_000)
	rt := cyclesv1.NewRuntimeServiceClient(conn)
	var held []string
	for _, k := range []string{"h1", "h2"} {
		r, err := rt.CreateReservation(keyCtx(key), reserveReq(k, 100))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, r.GetReservationId())
	}

	rdb := srv.Client(t)
	ctx := context.Background()
	fill := func() {
		info := rdb.Info(ctx, "memory").Val()
		used, _ := strconv.ParseInt(infoLine(info, "used_memory"), 10, 64)
		if err := rdb.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used-64<<10, 10)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	fill()
	hc := healthpb.NewHealthClient(conn)
	waitHealth(t, hc, healthpb.HealthCheckResponse_NOT_SERVING)

	before := budgetOf(t, conn, "full")
	_, err := rt.CreateReservation(keyCtx(key), reserveReq("new-hold", 10))
	if status.Code(err) != codes.ResourceExhausted || reasonOf(err) != apierr.StoreFull {
		t.Fatalf("reserve on a full Redis: %v, want RESOURCE_EXHAUSTED/STORE_FULL", err)
	}
	if after := budgetOf(t, conn, "full"); after.GetReserved() != before.GetReserved() || after.GetSpent() != before.GetSpent() {
		t.Fatalf("a refused reserve changed the budget: %v -> %v", before, after)
	}
	if n := d.metricValue(t, "cycles_store_full_refusals_total"); n < 1 {
		t.Fatalf("store full refusals = %v", n)
	}

	// Settlement frees budget even now; so does revoking a key.
	fill()
	if _, err := rt.CommitReservation(keyCtx(key), &cyclesv1.CommitReservationRequest{
		ReservationId: held[0], IdempotencyKey: "c1", Actual: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 60},
	}); err != nil {
		t.Fatalf("commit on a full Redis: %v", err)
	}
	fill()
	if _, err := rt.ReleaseReservation(keyCtx(key), &cyclesv1.ReleaseReservationRequest{ReservationId: held[1], IdempotencyKey: "r1"}); err != nil {
		t.Fatalf("release on a full Redis: %v", err)
	}
	b := budgetOf(t, conn, "full")
	if b.GetReserved() != 0 || b.GetSpent() != 60 || b.GetRemaining() != 1_000-60 {
		t.Fatalf("after settling on a full Redis: reserved %d spent %d remaining %d", b.GetReserved(), b.GetSpent(), b.GetRemaining())
	}
	fill()
	admin := cyclesv1.NewAdminServiceClient(conn)
	pk, _ := auth.ParseAPIKey(key)
	if _, err := admin.RevokeApiKey(adminCtx(), &cyclesv1.RevokeApiKeyRequest{TenantId: "full", KeyId: pk.KeyID}); err != nil {
		t.Fatalf("revoke on a full Redis: %v", err)
	}
	if _, err := rt.GetBalances(keyCtx(key), &cyclesv1.GetBalancesRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("revoked key still works: %v", err)
	}

	// Room again: health and new holds come back by themselves.
	if err := rdb.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	waitHealth(t, hc, healthpb.HealthCheckResponse_SERVING)
	key2, err := admin.CreateApiKey(adminCtx(), &cyclesv1.CreateApiKeyRequest{TenantId: "full", Name: "after"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.CreateReservation(keyCtx(key2.GetSecret()), reserveReq("after", 10)); err != nil {
		t.Fatalf("reserve after memory was freed: %v", err)
	}
	if !strings.Contains(d.out.String(), "budget store is full") {
		t.Fatal("no log line says the store is full and what to do")
	}
}

func infoLine(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

func reasonOf(err error) apierr.Code {
	code, _, _ := apierr.FromStatus(err)
	return code
}
