package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
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
	d := serveOn(t, srv, "-health-interval", "100ms")
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

// TestPausedRedisRetryConvergesToOneReservation: Redis freezes (SIGSTOP)
// under a stream of reserves; calls caught by the pause answer UNAVAILABLE,
// and some of them were applied when Redis resumed: UNAVAILABLE on a
// mutation means "may have been applied". Retrying each with its
// idempotency key converges on exactly one reservation per key.
func TestPausedRedisRetryConvergesToOneReservation(t *testing.T) {
	srv := redistest.Start(t)
	// The default per-key guard is off: 8 unpaced workers reserve faster
	// than its 1,000/s on a quiet machine, and its refusals (LIMIT_EXCEEDED)
	// are not what this test is about.
	d := serveOn(t, srv,
		"-request-timeout", "300ms", "-health-interval", "100ms", "-guard-policy=")
	conn := d.conn(t)
	key := provision(t, conn, "paused", 1_000_000_000)
	rt := cyclesv1.NewRuntimeServiceClient(conn)
	t.Cleanup(srv.Resume)

	const amount = 10
	var mu sync.Mutex
	okIDs := map[string]string{} // idempotency key -> reservation id
	var unavailable []string
	var seq atomic.Int64
	stop := time.Now().Add(2 * time.Second)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Go(func() {
			for time.Now().Before(stop) {
				idem := fmt.Sprintf("paused-%d", seq.Add(1))
				r, err := rt.CreateReservation(keyCtx(key), reserveReq(idem, amount))
				mu.Lock()
				switch status.Code(err) {
				case codes.OK:
					okIDs[idem] = r.GetReservationId()
				case codes.Unavailable:
					unavailable = append(unavailable, idem)
				default:
					t.Errorf("reserve %s: %v", idem, err)
				}
				mu.Unlock()
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	srv.Pause()
	time.Sleep(time.Second)
	srv.Resume()
	wg.Wait()
	time.Sleep(300 * time.Millisecond)
	if len(unavailable) == 0 {
		t.Fatal("no call was caught by the pause: the test proves nothing")
	}
	applied := (budgetOf(t, conn, "paused").GetReserved() - int64(len(okIDs))*amount) / amount
	t.Logf("%d reserves OK, %d UNAVAILABLE during the pause, of which %d were applied anyway", len(okIDs), len(unavailable), applied)

	retry := func(idem string) string {
		deadline := time.Now().Add(15 * time.Second)
		for {
			r, err := rt.CreateReservation(keyCtx(key), reserveReq(idem, amount))
			if err == nil {
				return r.GetReservationId()
			}
			if status.Code(err) != codes.Unavailable || time.Now().After(deadline) {
				t.Fatalf("retry of %s: %v", idem, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for _, idem := range unavailable {
		id := retry(idem)
		if again := retry(idem); again != id {
			t.Fatalf("retries of %s gave %s then %s", idem, id, again)
		}
		okIDs[idem] = id
	}
	for idem, id := range okIDs {
		if got := retry(idem); got != id {
			t.Fatalf("replay of %s gave %s, want %s", idem, got, id)
		}
	}
	if b := budgetOf(t, conn, "paused"); b.GetReserved() != int64(len(okIDs))*amount {
		t.Fatalf("reserved = %d, want exactly %d: one reservation per idempotency key", b.GetReserved(), len(okIDs)*amount)
	}
}
