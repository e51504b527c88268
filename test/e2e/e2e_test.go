// Package e2e runs the real cyclesd binary against real redis-server
// processes and drives it over gRPC, as an operator and an agent would.
package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cyclesgo/cycles-go/test/crash/cyclesdtest"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/app"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/permission"
	"github.com/cyclesgo/cycles-go/test/redistest"
)

const adminKey = "e2e-admin-key-0123456789abcdef0123456789"

var binary string

func TestMain(m *testing.M) { cyclesdtest.Main(m, "cyclesd-e2e-", &binary) }

// daemon is one running cyclesd.
type daemon struct {
	cmd     *exec.Cmd
	addr    string
	metrics string
	out     *bytes.Buffer
	done    chan error
}

// serveOn starts cyclesd on srv with the test admin key, args adding
// flags, and waits until it serves.
func serveOn(t *testing.T, srv *redistest.Server, args ...string) *daemon {
	t.Helper()
	d := startDaemon(t, []string{"CYCLESD_REDIS_ADDRS=" + srv.Addr, "CYCLESD_ADMIN_KEY=" + adminKey}, args...)
	d.waitServing(t)
	return d
}

func startDaemon(t *testing.T, env []string, args ...string) *daemon {
	t.Helper()
	d := &daemon{
		addr:    fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t)),
		metrics: fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t)),
		out:     &bytes.Buffer{},
		done:    make(chan error, 1),
	}
	d.cmd = exec.Command(binary, append([]string{"-listen", d.addr, "-http-listen=", "-metrics-addr", d.metrics, "-log-format", "json"}, args...)...)
	d.cmd.Env = append(os.Environ(), env...)
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.done <- d.cmd.Wait() }()
	t.Cleanup(func() {
		_ = d.cmd.Process.Kill()
		if t.Failed() {
			t.Logf("cyclesd output:\n%s", d.out.String())
		}
	})
	return d
}

func (d *daemon) conn(t *testing.T) *grpc.ClientConn {
	t.Helper()
	c, err := grpc.NewClient(d.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// waitServing waits until gRPC health says SERVING.
func (d *daemon) waitServing(t *testing.T) {
	t.Helper()
	hc := healthpb.NewHealthClient(d.conn(t))
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-d.done:
			t.Fatalf("cyclesd exited early: %v\n%s", err, d.out.String())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		res, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && res.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("cyclesd never became SERVING: %v\n%s", err, d.out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func adminCtx() context.Context {
	return metadata.NewOutgoingContext(context.Background(), metadata.Pairs(auth.AdminKeyHeader, adminKey))
}

func keyCtx(key string) context.Context {
	return metadata.NewOutgoingContext(context.Background(), metadata.Pairs(auth.APIKeyHeader, key))
}

func TestOperatorAndAgentSessionOnRealRedis(t *testing.T) {
	srv := redistest.Start(t)
	d := serveOn(t, srv)
	conn := d.conn(t)
	admin := cyclesv1.NewAdminServiceClient(conn)
	runtime := cyclesv1.NewRuntimeServiceClient(conn)

	if _, err := admin.CreateTenant(adminCtx(), &cyclesv1.CreateTenantRequest{TenantId: "acme", Name: "Acme"}); err != nil {
		t.Fatal(err)
	}
	key, err := admin.CreateApiKey(adminCtx(), &cyclesv1.CreateApiKeyRequest{TenantId: "acme", Name: "agents", Permissions: append(slices.Clone(permission.Default), "events:read")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CreateBudget(adminCtx(), &cyclesv1.CreateBudgetRequest{
		TenantId: "acme", ScopePath: "tenant:acme/workspace:prod", Unit: cyclesv1.Unit_UNIT_TOKENS, Allocated: 10_000,
	}); err != nil {
		t.Fatal(err)
	}
	ctx := keyCtx(key.GetSecret())
	res, err := runtime.CreateReservation(ctx, &cyclesv1.CreateReservationRequest{
		IdempotencyKey: "r-1",
		Subject:        &cyclesv1.Subject{Workspace: "prod", Agent: "summarizer"},
		Action:         &cyclesv1.Action{Kind: "llm.completion", Name: "gpt-4o-mini"},
		Estimate:       &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 1_000},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.GetDecision() != cyclesv1.Decision_DECISION_ALLOW || res.GetReservationId() == "" {
		t.Fatalf("reserve = %v", res)
	}
	commit, err := runtime.CommitReservation(ctx, &cyclesv1.CommitReservationRequest{
		ReservationId: res.GetReservationId(), IdempotencyKey: "c-1",
		Actual: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 700},
	})
	if err != nil {
		t.Fatal(err)
	}
	if commit.GetCharged().GetAmount() != 700 || commit.GetReleased().GetAmount() != 300 {
		t.Fatalf("commit = %v", commit)
	}
	b, err := admin.GetBudget(adminCtx(), &cyclesv1.GetBudgetRequest{TenantId: "acme", ScopePath: "tenant:acme/workspace:prod", Unit: cyclesv1.Unit_UNIT_TOKENS})
	if err != nil {
		t.Fatal(err)
	}
	got := b.GetBudget()
	if got.GetAllocated() != 10_000 || got.GetSpent() != 700 || got.GetReserved() != 0 || got.GetRemaining() != 9_300 || got.GetDebt() != 0 {
		t.Fatalf("ledger after commit = %v", got)
	}

	// A budget denial is FAILED_PRECONDITION with the protocol reason.
	_, err = runtime.CreateReservation(ctx, &cyclesv1.CreateReservationRequest{
		IdempotencyKey: "r-2", Subject: &cyclesv1.Subject{Workspace: "prod"},
		Action:   &cyclesv1.Action{Kind: "llm.completion", Name: "big"},
		Estimate: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 1_000_000},
	})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("over-budget reserve: %v", err)
	}
	if reason, md, _ := apierr.FromStatus(err); reason != apierr.BudgetExceeded || md["scope"] == "" {
		t.Fatalf("reason = %v details %v", reason, md)
	}

	// Metrics are exposed for Prometheus and counted the reservation.
	body := httpGet(t, "http://"+d.metrics+"/metrics")
	if !strings.Contains(body, "cycles_reservations_created") || !strings.Contains(body, `tenant="acme"`) {
		t.Fatalf("/metrics lacks the per-tenant reservation counter:\n%.2000s", body)
	}

	// SIGTERM drains and exits cleanly.
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-d.done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("cyclesd did not stop after SIGTERM")
	}
	if !strings.Contains(d.out.String(), "cyclesd stopped") {
		t.Fatalf("no clean shutdown log:\n%s", d.out.String())
	}
}

func TestDevModeSeedsAWorkingDemo(t *testing.T) {
	d := startDaemon(t, nil)
	d.waitServing(t)
	runtime := cyclesv1.NewRuntimeServiceClient(d.conn(t))
	res, err := runtime.CreateReservation(keyCtx(app.DevAPIKey), &cyclesv1.CreateReservationRequest{
		IdempotencyKey: "try-1", Subject: &cyclesv1.Subject{Workspace: "prod", Agent: "bot"},
		Action:   &cyclesv1.Action{Kind: "llm.completion", Name: "gpt-4o-mini"},
		Estimate: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 500},
	})
	if err != nil {
		t.Fatalf("the README's first reserve fails in dev mode: %v", err)
	}
	if len(res.GetBalances()) != 3 {
		t.Fatalf("want the three seeded scopes charged, got %v", res.GetBalances())
	}
	if !strings.Contains(d.out.String(), "DEV MODE") || !strings.Contains(d.out.String(), app.DevAPIKey) {
		t.Fatalf("dev mode must say so loudly and print the demo key:\n%s", d.out.String())
	}
}

func TestRefusesEvictingRedis(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Args: []string{"--maxmemory-policy", "allkeys-lru"}})
	d := startDaemon(t, []string{"CYCLESD_REDIS_ADDRS=" + srv.Addr, "CYCLESD_ADMIN_KEY=" + adminKey})
	select {
	case err := <-d.done:
		if err == nil || !strings.Contains(d.out.String(), "allkeys-lru") {
			t.Fatalf("want a refusal naming the policy, got %v:\n%s", err, d.out.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("cyclesd started on an allkeys-lru Redis")
	}
	serveOn(t, srv, "-allow-eviction-policy") // fails the test unless it serves
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	res, err := http.Get(url) //nolint:noctx // test
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return string(b)
}
