package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/permission"
	"github.com/cyclesgo/cycles-go/test/redistest"
)

// provision creates tenant t with one TOKENS budget at the tenant scope and
// returns an API key.
func provision(t *testing.T, conn *grpc.ClientConn, tenant string, allocated int64) string {
	t.Helper()
	admin := cyclesv1.NewAdminServiceClient(conn)
	if _, err := admin.CreateTenant(adminCtx(), &cyclesv1.CreateTenantRequest{TenantId: tenant}); err != nil {
		t.Fatal(err)
	}
	key, err := admin.CreateApiKey(adminCtx(), &cyclesv1.CreateApiKeyRequest{TenantId: tenant, Name: "e2e", Permissions: append(slices.Clone(permission.Default), "events:read")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CreateBudget(adminCtx(), &cyclesv1.CreateBudgetRequest{
		TenantId: tenant, ScopePath: "tenant:" + tenant, Unit: cyclesv1.Unit_UNIT_TOKENS, Allocated: allocated,
	}); err != nil {
		t.Fatal(err)
	}
	return key.GetSecret()
}

func reserveReq(key string, amount int64) *cyclesv1.CreateReservationRequest {
	return &cyclesv1.CreateReservationRequest{
		IdempotencyKey: key, Subject: &cyclesv1.Subject{Agent: "a"},
		Action:   &cyclesv1.Action{Kind: "llm.completion", Name: "m"},
		Estimate: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: amount},
	}
}

func budgetOf(t *testing.T, conn *grpc.ClientConn, tenant string) *cyclesv1.Budget {
	t.Helper()
	b, err := cyclesv1.NewAdminServiceClient(conn).GetBudget(adminCtx(), &cyclesv1.GetBudgetRequest{
		TenantId: tenant, ScopePath: "tenant:" + tenant, Unit: cyclesv1.Unit_UNIT_TOKENS})
	if err != nil {
		t.Fatal(err)
	}
	return b.GetBudget()
}

// TestFailClosedAndRecover stops Redis under load: every reserve fails fast
// with UNAVAILABLE (none is allowed unbudgeted), health turns NOT_SERVING, and
// when Redis comes back service and health recover with no restart.
func TestFailClosedAndRecover(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Args: []string{"--appendonly", "yes", "--appendfsync", "always"}})
	d := serveOn(t, srv,
		// The guard is off: 4 unpaced workers can outrun its default 1,000/s on
		// a fast machine, and a LIMIT_EXCEEDED is not what this test is about.
		"-health-interval", "100ms", "-request-timeout", "300ms", "-guard-policy=")
	conn := d.conn(t)
	key := provision(t, conn, "failclosed", 1_000_000_000)
	runtime := cyclesv1.NewRuntimeServiceClient(conn)
	hc := healthpb.NewHealthClient(conn)

	var ok, unavailable, other, slow atomic.Int64
	var acknowledged sync.Map // idempotency key -> reservation id acknowledged
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := fmt.Sprintf("w%d-%d", w, i)
				start := time.Now()
				res, err := runtime.CreateReservation(keyCtx(key), reserveReq(k, 1))
				if time.Since(start) > 2*time.Second {
					slow.Add(1)
				}
				switch {
				case err == nil:
					ok.Add(1)
					acknowledged.Store(k, res.GetReservationId())
				case status.Code(err) == codes.Unavailable:
					unavailable.Add(1)
				default:
					other.Add(1)
					t.Errorf("unexpected error during outage: %v", err)
				}
				time.Sleep(2 * time.Millisecond)
			}
		}(w)
	}
	time.Sleep(300 * time.Millisecond)
	srv.Kill()
	waitHealth(t, hc, healthpb.HealthCheckResponse_NOT_SERVING)
	// A call answers within its 300 ms request timeout; a loaded machine
	// may deliver the first answer later, so wait for it (calls over 2 s
	// still fail the test below).
	before := unavailable.Load()
	for down := time.Now().Add(10 * time.Second); unavailable.Load() == before; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(down) {
			t.Fatal("no UNAVAILABLE answers while Redis was down")
		}
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	waitHealth(t, hc, healthpb.HealthCheckResponse_SERVING)
	okBefore := ok.Load()
	deadline := time.Now().Add(10 * time.Second)
	for ok.Load() == okBefore {
		if time.Now().After(deadline) {
			t.Fatal("reserves never succeeded again after Redis returned")
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if slow.Load() > 0 {
		t.Errorf("%d calls took over 2 s: fail fast means well under the request timeout plus a dial", slow.Load())
	}
	// Every acknowledged reserve survived (AOF fsync always) and nothing else
	// was charged: reserved equals exactly the acknowledged count.
	var acked int64
	acknowledged.Range(func(_, _ any) bool { acked++; return true })
	b := budgetOf(t, conn, "failclosed")
	if b.GetReserved() < acked {
		t.Fatalf("reserved %d < %d acknowledged reserves: an acknowledged write was lost", b.GetReserved(), acked)
	}
	// A reserve whose answer was lost in the outage may have been applied;
	// nothing beyond what was asked for can have been.
	if b.GetReserved() > acked+unavailable.Load() {
		t.Fatalf("reserved %d > %d acknowledged + %d unanswered", b.GetReserved(), acked, unavailable.Load())
	}
	t.Logf("ok=%d unavailable=%d other=%d", ok.Load(), unavailable.Load(), other.Load())
}

func waitHealth(t *testing.T, hc healthpb.HealthClient, want healthpb.HealthCheckResponse_ServingStatus) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		res, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "cycles.v1.RuntimeService"})
		cancel()
		if err == nil && res.GetStatus() == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("health never became %v (%v, %v)", want, res.GetStatus(), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLostResponseRetryHasOneEffect: a client that gives up right after
// sending and retries with the same key gets exactly one reservation.
func TestLostResponseRetryHasOneEffect(t *testing.T) {
	srv := redistest.Start(t)
	d := serveOn(t, srv)
	conn := d.conn(t)
	key := provision(t, conn, "lostresp", 1_000_000)
	runtime := cyclesv1.NewRuntimeServiceClient(conn)
	const n = 50
	for i := 0; i < n; i++ {
		k := fmt.Sprintf("lost-%d", i)
		// Cancel after a varying short delay: some requests are cut before
		// the server acts, some after; the client cannot tell which.
		ctx, cancel := context.WithTimeout(keyCtx(key), time.Duration(i%10)*100*time.Microsecond)
		_, _ = runtime.CreateReservation(ctx, reserveReq(k, 10))
		cancel()
		first, err := runtime.CreateReservation(keyCtx(key), reserveReq(k, 10))
		if err != nil {
			t.Fatalf("retry %s: %v", k, err)
		}
		again, err := runtime.CreateReservation(keyCtx(key), reserveReq(k, 10))
		if err != nil || again.GetReservationId() != first.GetReservationId() {
			t.Fatalf("replay of %s gave %v, %v; want %s", k, again.GetReservationId(), err, first.GetReservationId())
		}
	}
	if b := budgetOf(t, conn, "lostresp"); b.GetReserved() != n*10 {
		t.Fatalf("reserved = %d, want exactly %d (one effect per key)", b.GetReserved(), n*10)
	}
}

// TestSentinelFailoverIsFollowed: cyclesd talks to a Sentinel-managed master;
// after the master dies, it follows the promoted replica without a restart.
func TestSentinelFailoverIsFollowed(t *testing.T) {
	s := redistest.StartSentinel(t)
	d := startDaemon(t, []string{"CYCLESD_REDIS_ADDRS=" + s.Sentinel.Addr, "CYCLESD_REDIS_MASTER_NAME=" + s.MasterName,
		"CYCLESD_ADMIN_KEY=" + adminKey})
	d.waitServing(t)
	conn := d.conn(t)
	key := provision(t, conn, "sentinel", 1_000_000)
	runtime := cyclesv1.NewRuntimeServiceClient(conn)
	if _, err := runtime.CreateReservation(keyCtx(key), reserveReq("before", 5)); err != nil {
		t.Fatal(err)
	}
	s.Master.Kill()
	deadline := time.Now().Add(45 * time.Second)
	for i := 0; ; i++ {
		_, err := runtime.CreateReservation(keyCtx(key), reserveReq(fmt.Sprintf("after-%d", i), 5))
		if err == nil {
			break
		}
		if code, _, _ := apierr.FromStatus(err); code != apierr.Unavailable && status.Code(err) != codes.Unavailable {
			t.Fatalf("during failover: %v (want UNAVAILABLE until the replica is promoted)", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("cyclesd never followed the failover: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestTLSAndMutualTLS: with -tls-client-ca, a client without a certificate is
// refused and one with a certificate signed by the CA is served.
func TestTLSAndMutualTLS(t *testing.T) {
	p := newPKI(t)
	d := startDaemon(t, nil, "-tls-cert", p.serverCert, "-tls-key", p.serverKey, "-tls-client-ca", p.caFile)
	dial := func(cert *tls.Certificate) error {
		tc := &tls.Config{RootCAs: p.pool, MinVersion: tls.VersionTLS12}
		if cert != nil {
			tc.Certificates = []tls.Certificate{*cert}
		}
		c, err := grpc.NewClient(d.addr, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
		if err != nil {
			return err
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = healthpb.NewHealthClient(c).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(cert != nil))
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for dial(&p.client) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("mTLS client never served: %v\n%s", dial(&p.client), d.out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := dial(nil); err == nil {
		t.Fatal("a client without a certificate was served")
	}
}
