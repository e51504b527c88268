// Package cyclesdtest runs the real cyclesd binary for the crash and soak
// suites: build it once per test binary, start it on fresh ports, SIGKILL it,
// restart it on the same addresses, and provision tenants over AdminService.
package cyclesdtest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/permission"
	"github.com/cyclesgo/cycles-go/test/redistest"
)

// AdminKey is the admin key every daemon of these suites is started with.
const AdminKey = "crash-soak-admin-key-0123456789abcdef"

// Build compiles cmd/cyclesd into dir and returns the binary's path.
func Build(dir string) (string, error) {
	bin := filepath.Join(dir, "cyclesd")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/cyclesgo/cycles-go/cmd/cyclesd").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("build cyclesd: %w\n%s", err, out)
	}
	return bin, nil
}

// BuildTemp compiles cmd/cyclesd into a new temporary directory (named
// prefix*), sets *bin to the binary's path and returns the teardown that
// removes the directory: what a suite's redistest.MainOptions.Setup does.
func BuildTemp(prefix string, bin *string) (teardown func(), err error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return nil, err
	}
	*bin, err = Build(dir)
	return func() { _ = os.RemoveAll(dir) }, err
}

// Main is the TestMain of a suite that runs the binary: redistest.Main with
// its leak check, after BuildTemp(prefix, bin).
func Main(m *testing.M, prefix string, bin *string) {
	redistest.Main(m, redistest.MainOptions{LeakCheck: true, Setup: func() (func(), error) { return BuildTemp(prefix, bin) }})
}

// SyncBuffer collects a process's output while tests read it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *SyncBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *SyncBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Daemon is one cyclesd process (and its successors after Restart).
type Daemon struct {
	Bin         string
	Addr        string // gRPC
	MetricsAddr string // HTTP /metrics
	env         []string
	args        []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan error
	out  *SyncBuffer
	runs int
}

// Start runs cyclesd against redisAddr on fresh ports; extra args are cyclesd
// flags. The process is killed at cleanup (and with the test binary).
func Start(tb testing.TB, bin, redisAddr string, args ...string) *Daemon {
	tb.Helper()
	d := &Daemon{
		Bin:         bin,
		Addr:        fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(tb)),
		MetricsAddr: fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(tb)),
		env:         []string{"CYCLESD_REDIS_ADDRS=" + redisAddr, "CYCLESD_ADMIN_KEY=" + AdminKey},
		args:        args,
		out:         &SyncBuffer{},
	}
	d.spawn(tb)
	tb.Cleanup(func() {
		d.Kill()
		if tb.Failed() {
			tb.Logf("cyclesd output (%d runs):\n%s", d.runs, tail(d.out.String(), 8000))
		}
	})
	return d
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

func (d *Daemon) spawn(tb testing.TB) {
	tb.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	args := append([]string{"-listen", d.Addr, "-http-listen=", "-metrics-addr", d.MetricsAddr, "-log-format", "json", "-log-level", "warn"}, d.args...)
	cmd := exec.Command(d.Bin, args...)
	cmd.Env = append(os.Environ(), d.env...)
	cmd.Stdout, cmd.Stderr = d.out, d.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start cyclesd: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	d.cmd, d.done = cmd, done
	d.runs++
}

// Kill SIGKILLs the running process (a crash: no drain, no cleanup) and
// waits until it is gone.
func (d *Daemon) Kill() {
	d.mu.Lock()
	cmd, done := d.cmd, d.done
	d.cmd = nil
	d.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done //nolint:errcheck // killed on purpose: its exit status says nothing
}

// Restart starts a new process on the same addresses (after Kill).
func (d *Daemon) Restart(tb testing.TB) {
	tb.Helper()
	d.Kill()
	d.spawn(tb)
}

// PID is the running process id (0 when none).
func (d *Daemon) PID() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cmd == nil {
		return 0
	}
	return d.cmd.Process.Pid
}

// Output is everything the processes printed.
func (d *Daemon) Output() string { return d.out.String() }

// Conn is a gRPC client connection (it reconnects across restarts).
func (d *Daemon) Conn(tb testing.TB) *grpc.ClientConn {
	tb.Helper()
	c, err := grpc.NewClient(d.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// WaitServing waits until gRPC health reports SERVING.
func (d *Daemon) WaitServing(tb testing.TB) {
	tb.Helper()
	conn := d.Conn(tb)
	hc := healthpb.NewHealthClient(conn)
	deadline := time.Now().Add(60 * time.Second)
	for {
		d.mu.Lock()
		done := d.done
		d.mu.Unlock()
		select {
		case err := <-done:
			done <- err // for Kill at cleanup, which waits on it (it would hang)
			tb.Fatalf("cyclesd exited early: %v\n%s", err, tail(d.Output(), 8000))
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		res, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "cycles.v1.RuntimeService"})
		cancel()
		if err == nil && res.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("cyclesd never became SERVING: %v\n%s", err, tail(d.Output(), 8000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Metrics scrapes /metrics.
func (d *Daemon) Metrics(tb testing.TB) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.MetricsAddr+"/metrics", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatalf("scrape /metrics: %v", err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

// MetricValue returns the sum of every sample of a Prometheus metric (all
// label sets) in a scrape, and whether any was found.
func MetricValue(scrape, name string) (float64, bool) {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `(?:\{[^}]*\})? ([-+0-9.eE]+)$`)
	var sum float64
	found := false
	for _, m := range re.FindAllStringSubmatch(scrape, -1) {
		v, err := strconv.ParseFloat(m[1], 64)
		if err == nil {
			sum += v
			found = true
		}
	}
	return sum, found
}

// AdminCtx carries the admin key.
func AdminCtx(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, auth.AdminKeyHeader, AdminKey)
}

// KeyCtx carries a tenant API key.
func KeyCtx(ctx context.Context, key string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, auth.APIKeyHeader, key)
}

// Budget is one budget to create.
type Budget struct {
	ScopePath      string // "tenant:<t>/..."; "" = the tenant scope
	Allocated      int64
	OverdraftLimit int64
}

// Provision creates the tenant, its budgets (TOKENS) and an API key, over
// AdminService, and returns the key.
func Provision(tb testing.TB, conn *grpc.ClientConn, tenant string, budgets ...Budget) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := cyclesv1.NewAdminServiceClient(conn)
	if _, err := admin.CreateTenant(AdminCtx(ctx), &cyclesv1.CreateTenantRequest{TenantId: tenant, Name: tenant}); err != nil {
		tb.Fatalf("create tenant %s: %v", tenant, err)
	}
	for _, b := range budgets {
		path := b.ScopePath
		if path == "" {
			path = "tenant:" + tenant
		}
		if _, err := admin.CreateBudget(AdminCtx(ctx), &cyclesv1.CreateBudgetRequest{
			TenantId: tenant, ScopePath: path, Unit: cyclesv1.Unit_UNIT_TOKENS, Allocated: b.Allocated, OverdraftLimit: b.OverdraftLimit,
		}); err != nil {
			tb.Fatalf("create budget %s: %v", path, err)
		}
	}
	key, err := admin.CreateApiKey(AdminCtx(ctx), &cyclesv1.CreateApiKeyRequest{TenantId: tenant, Name: "suite", Permissions: append(slices.Clone(permission.Default), "events:read")})
	if err != nil {
		tb.Fatalf("create key: %v", err)
	}
	return key.GetSecret()
}
