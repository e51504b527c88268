package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/test/redistest"
)

// procKB reads a field (VmRSS, VmHWM) of /proc/<pid>/status in kB.
func procKB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// metricValue sums the samples of a Prometheus counter on the daemon's /metrics.
func (d *daemon) metricValue(t *testing.T, name string) float64 {
	t.Helper()
	body := httpGet(t, "http://"+d.metrics+"/metrics")
	var sum float64
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := strings.TrimPrefix(line, name)
		if rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		sum += v
	}
	return sum
}

// TestUnauthenticatedFloodIsRefusedBeforeTheBody sends 1,000 requests of 4 MB
// with no API key from 32 streams. The receive limit is raised to 8 MiB so
// that the bodies WOULD be read if anything but the pre-auth tap refused
// them. The daemon's peak RSS grows by less than 100 MB and every call is
// refused before its body is read (the tap's refusal counter).
func TestUnauthenticatedFloodIsRefusedBeforeTheBody(t *testing.T) {
	srv := redistest.Start(t)
	d := serveOn(t, srv,
		"-max-recv-msg-bytes", strconv.Itoa(8<<20), "-max-runtime-recv-bytes", strconv.Itoa(8<<20))
	conn := d.conn(t)
	rt := cyclesv1.NewRuntimeServiceClient(conn)
	pid := d.cmd.Process.Pid
	rssBefore, hwmBefore := procKB(t, pid, "VmRSS"), procKB(t, pid, "VmHWM")

	req := &cyclesv1.CreateReservationRequest{IdempotencyKey: strings.Repeat("x", 4<<20)}
	const total, workers = 1000, 32
	var next, refused, cut atomic.Int64
	var other sync.Map
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Go(func() {
			for next.Add(1) <= total {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := rt.CreateReservation(ctx, req)
				cancel()
				switch status.Code(err) {
				case codes.Unauthenticated, codes.ResourceExhausted:
					refused.Add(1)
				case codes.Unavailable:
					// The connection was closed for carrying only refusals
					// (docs/limits.md, refused_streams); the client reconnects.
					cut.Add(1)
				default:
					other.Store(status.Code(err).String(), err)
				}
			}
		})
	}
	wg.Wait()
	other.Range(func(k, v any) bool {
		t.Errorf("a call answered %s: %v", k, v)
		return true
	})
	rssAfter, hwmAfter := procKB(t, pid, "VmRSS"), procKB(t, pid, "VmHWM")
	t.Logf("cyclesd RSS %d -> %d MB, peak %d -> %d MB (1,000 x 4 MB unauthenticated, 32 streams)",
		rssBefore>>10, rssAfter>>10, hwmBefore>>10, hwmAfter>>10)
	if refused.Load()+cut.Load() != total {
		t.Fatalf("%d of %d calls refused, %d cut by a connection closure", refused.Load(), total, cut.Load())
	}
	if cut.Load() > 0 && d.metricValue(t, "cycles_conn_limit_closures_total") == 0 {
		t.Fatalf("%d calls cut, but no connection closed by a limit", cut.Load())
	}
	if growth := (hwmAfter - hwmBefore) >> 10; growth >= 100 {
		t.Fatalf("peak RSS grew by %d MB (limit 100)", growth)
	}
	// Every answered call was refused by the tap (its body unread); calls cut
	// by a closure may or may not have reached it.
	if n := d.metricValue(t, "cycles_rpc_preauth_refusals_total"); n < float64(refused.Load()) || n > total {
		t.Fatalf("preauth refusals = %v, want %d..%d: some bodies were read", n, refused.Load(), total)
	}
}

// TestSilentSocketsAreClosed: a socket that never starts HTTP/2 is closed
// after -handshake-timeout, not held for minutes.
func TestSilentSocketsAreClosed(t *testing.T) {
	srv := redistest.Start(t)
	d := serveOn(t, srv, "-handshake-timeout", "500ms")
	c, err := net.Dial("tcp", d.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	start := time.Now()
	_, err = c.Read(make([]byte, 1))
	for err == nil {
		_, err = c.Read(make([]byte, 64))
	}
	if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the daemon held a silent socket for 30 s")
	}
	t.Logf("silent socket closed after %v (%v)", time.Since(start).Round(time.Millisecond), err)
}

// TestStreamChurnDoesNotHurtOtherTenants: tenant A holds 24 streams and 8
// goroutines churn opens and closes up to its limit of 32 for 10 s (each
// open reads A's log from the start), while tenant B reserves. B sees no
// UNAVAILABLE: stream work has its own Redis pool and every stream read a
// deadline. B's latency is logged, not asserted (speed goals live in
// cycles-bench). Opens past the limit are refused (TestStreamLimitsPerKeyAndTotal).
// The default per-key guard is off: B reserves unpaced, and on a quiet
// machine faster than the guard's 1,000/s, so the guard would refuse B for
// its own rate, which is not what this test is about.
func TestStreamChurnDoesNotHurtOtherTenants(t *testing.T) {
	srv := redistest.Start(t)
	d := serveOn(t, srv, "-streams-per-key", "32", "-guard-policy=")
	keyA := provision(t, d.conn(t), "tenant-a", 1_000_000)
	keyB := provision(t, d.conn(t), "tenant-b", 1_000_000_000)
	connA, connB := d.conn(t), d.conn(t)
	ev := cyclesv1.NewEventServiceClient(connA)
	watch := func(ctx context.Context) error {
		st, err := ev.WatchEvents(ctx, &cyclesv1.WatchEventsRequest{Start: cyclesv1.StartPosition_START_POSITION_EARLIEST})
		if err == nil {
			_, err = st.Recv()
		}
		return err
	}
	ctxA, stopA := context.WithCancel(keyCtx(keyA))
	defer stopA()
	for i := 0; i < 24; i++ {
		if err := watch(ctxA); err != nil {
			t.Fatalf("held stream %d: %v", i, err)
		}
	}
	const churnFor = 10 * time.Second
	deadline := time.Now().Add(churnFor)
	var opened, limited atomic.Int64
	var otherA sync.Map
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				ctx, cancel := context.WithCancel(ctxA)
				err := watch(ctx)
				cancel()
				switch status.Code(err) {
				case codes.OK:
					opened.Add(1)
				case codes.ResourceExhausted:
					limited.Add(1)
				default:
					otherA.Store(status.Code(err).String(), err)
				}
			}
		})
	}
	rt := cyclesv1.NewRuntimeServiceClient(connB)
	var mu sync.Mutex
	var lat []time.Duration
	var unavailable, failed atomic.Int64
	var seq atomic.Int64
	for w := 0; w < 4; w++ {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				req := reserveReq(fmt.Sprintf("b-%d", seq.Add(1)), 1)
				start := time.Now()
				_, err := rt.CreateReservation(keyCtx(keyB), req)
				took := time.Since(start)
				switch status.Code(err) {
				case codes.OK:
					mu.Lock()
					lat = append(lat, took)
					mu.Unlock()
				case codes.Unavailable:
					unavailable.Add(1)
				default:
					failed.Add(1)
					t.Errorf("B's reserve: %v", err)
				}
			}
		})
	}
	wg.Wait()
	otherA.Range(func(k, v any) bool {
		t.Logf("A's churn also saw %s: %v", k, v)
		return true
	})
	slices.Sort(lat)
	pct := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(float64(len(lat))*p))]
	}
	t.Logf("A: %d streams opened+closed (%d refused) in %v; B: %d reserves, p50 %v, p99 %v, max %v, %d UNAVAILABLE",
		opened.Load(), limited.Load(), churnFor, len(lat), pct(0.50), pct(0.99), pct(1), unavailable.Load())
	if unavailable.Load() != 0 {
		t.Fatalf("tenant B saw %d UNAVAILABLE while A churned streams", unavailable.Load())
	}
	if opened.Load() == 0 || len(lat) == 0 {
		t.Fatal("no churn or no reserves: the test proves nothing")
	}
}

// TestWeakAdminKeysRefusedAtStart: outside dev mode the published dev key
// and keys under 32 characters stop cyclesd before it listens.
func TestWeakAdminKeysRefusedAtStart(t *testing.T) {
	for _, key := range []string{"dev-admin-key-change-me", "aaaaaaaaaaaaaaaa", strings.Repeat("k", 31)} {
		cmd := exec.Command(binary, "-listen", "127.0.0.1:0", "-http-listen=")
		cmd.Env = append(os.Environ(), "CYCLESD_REDIS_ADDRS=127.0.0.1:1", "CYCLESD_ADMIN_KEY="+key)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "admin key") {
			t.Fatalf("admin key %q: err %v, output %s", key, err, out)
		}
	}
}

// TestPlaintextNonLoopbackListenerWarns: serving without TLS beyond
// loopback is logged as a warning.
func TestPlaintextNonLoopbackListenerWarns(t *testing.T) {
	srv := redistest.Start(t)
	port := redistest.FreePort(t)
	d := startDaemon(t, []string{"CYCLESD_REDIS_ADDRS=" + srv.Addr, "CYCLESD_ADMIN_KEY=" + adminKey},
		"-listen", fmt.Sprintf("0.0.0.0:%d", port))
	d.addr = fmt.Sprintf("127.0.0.1:%d", port)
	d.waitServing(t)
	if !strings.Contains(d.out.String(), "plaintext gRPC listener on a non-loopback address") {
		t.Fatalf("no warning in:\n%s", d.out.String())
	}
}

// TestKeyGuessingLoopIsThrottled: 1,000 requests of 900 KiB (under the
// default receive limit) with made-up, well-formed API keys from 32 streams.
// At most -unverified-keys-per-peer distinct unverified keys are in flight,
// so only a few requests reach the store (one verification each); after
// -auth-fail-burst failures the address is throttled and the rest are
// refused before their body is read. Peak RSS grows by less than 100 MB.
func TestKeyGuessingLoopIsThrottled(t *testing.T) {
	srv := redistest.Start(t)
	d := serveOn(t, srv, "-max-runtime-recv-bytes", strconv.Itoa(1<<20))
	rt := cyclesv1.NewRuntimeServiceClient(d.conn(t))
	pid := d.cmd.Process.Pid
	hwmBefore := procKB(t, pid, "VmHWM")
	verifiedBefore := d.metricValue(t, "cycles_auth_cache_misses_total")

	req := &cyclesv1.CreateReservationRequest{IdempotencyKey: strings.Repeat("x", 900<<10)}
	const total, workers = 1000, 32
	var next, refused, cut atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > total {
					return
				}
				guess := fmt.Sprintf("cyc_acme_%016x_%064x", i, i)
				ctx, cancel := context.WithTimeout(keyCtx(guess), 10*time.Second)
				_, err := rt.CreateReservation(ctx, req)
				cancel()
				if c := status.Code(err); c == codes.Unauthenticated || c == codes.ResourceExhausted {
					refused.Add(1)
				} else if c == codes.Unavailable {
					cut.Add(1) // connection closed for carrying only refusals
				} else {
					t.Errorf("guess %d: %v", i, err)
				}
			}
		})
	}
	wg.Wait()
	hwmAfter := procKB(t, pid, "VmHWM")
	verified := d.metricValue(t, "cycles_auth_cache_misses_total") - verifiedBefore
	tapped := d.metricValue(t, "cycles_rpc_preauth_refusals_total")
	t.Logf("%d guesses: %v verified against Redis, %v refused before the body; peak RSS %d -> %d MB",
		total, verified, tapped, hwmBefore>>10, hwmAfter>>10)
	if refused.Load()+cut.Load() != total {
		t.Fatalf("%d of %d guesses refused, %d cut by a connection closure", refused.Load(), total, cut.Load())
	}
	// 20 failures, plus the unverified keys already in flight when the
	// address tipped over (at most 8).
	if verified > 20+8 {
		t.Fatalf("%v guesses cost a Redis verification, want at most %d", verified, 20+8)
	}
	if growth := (hwmAfter - hwmBefore) >> 10; growth >= 100 {
		t.Fatalf("peak RSS grew by %d MB (limit 100)", growth)
	}
}
