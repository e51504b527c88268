// Package crash kills the processes cyclesd depends on, and cyclesd itself,
// in the middle of load, restarts them, and checks that nothing the clients
// were told happened is lost, nothing happened twice, the ledger is sound,
// and clients only ever saw UNAVAILABLE while something was down. See
// README.md.
package crash

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/test/crash/cyclesdtest"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
	"github.com/cyclesgo/cycles-go/test/redistest"
)

var binary string

func TestMain(m *testing.M) { cyclesdtest.Main(m, "cyclesd-crash-", &binary) }

const phase = 1200 * time.Millisecond

// TestRedisKilledUnderLoad: Redis runs with AOF and appendfsync always. In
// the middle of a reserve+commit load it is SIGKILLed, left down for a while,
// and restarted from its files. Every reserve and commit the service
// acknowledged is there afterwards, UNAVAILABLE is the only error clients
// ever saw, a retry of each unanswered request with its idempotency key takes
// effect exactly once, and the ledger is exact (spent = sum of commits).
func TestRedisKilledUnderLoad(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Args: []string{"--appendonly", "yes", "--appendfsync", "always"}})
	d := cyclesdtest.Start(t, binary, srv.Addr, "-health-interval", "100ms", "-request-timeout", "500ms")
	d.WaitServing(t)
	conn := d.Conn(t)
	const tenant = "crash-redis"
	key := cyclesdtest.Provision(t, conn, tenant,
		cyclesdtest.Budget{Allocated: 1 << 50}, cyclesdtest.Budget{ScopePath: "tenant:" + tenant + "/workspace:w", Allocated: 1 << 50})
	l := newLoad(conn, key, tenant, func(r *rand.Rand) settle {
		if r.IntN(2) == 0 {
			return commitUnder
		}
		return commitOver
	})

	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { l.run(4, stop); close(done) }()

	time.Sleep(phase)
	okBefore := l.ok.Load()
	if okBefore == 0 {
		t.Fatal("no request succeeded before the kill")
	}
	srv.Kill()
	time.Sleep(phase)
	unavailable := l.unavailable.Load()
	if unavailable == 0 {
		t.Error("no UNAVAILABLE answers while Redis was down")
	}
	if _, err := os.Stat(filepath.Join(srv.Dir, "appendonlydir")); err != nil {
		t.Errorf("no AOF to restart from: %v", err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	d.WaitServing(t)
	okAtRestart := l.ok.Load()
	time.Sleep(phase)
	close(stop)
	<-done
	if l.ok.Load() == okAtRestart {
		t.Error("no request succeeded after Redis came back")
	}
	l.retryPending(t)
	l.check(t)
	rc := srv.Client(t)
	l.verify(t, rc, false)
	t.Logf("OK before the kill %d, UNAVAILABLE during the outage %d", okBefore, unavailable)
}

// subscriber watches the tenant's events and resumes from its last cursor
// whenever the stream breaks.
type subscriber struct {
	client cyclesv1.EventServiceClient
	key    string

	mu         sync.Mutex
	ids        []string
	seen       map[string]int
	cursor     string
	reconnects int
	errs       []string
}

func (s *subscriber) run(ctx context.Context) {
	for ctx.Err() == nil {
		s.mu.Lock()
		req := &cyclesv1.WatchEventsRequest{Start: cyclesv1.StartPosition_START_POSITION_EARLIEST}
		if s.cursor != "" {
			req = &cyclesv1.WatchEventsRequest{Start: cyclesv1.StartPosition_START_POSITION_CURSOR, Cursor: s.cursor}
		}
		s.mu.Unlock()
		stream, err := s.client.WatchEvents(cyclesdtest.KeyCtx(ctx, s.key), req)
		if err == nil {
			for {
				res, rerr := stream.Recv()
				if rerr != nil {
					err = rerr
					break
				}
				s.mu.Lock()
				if ev := res.GetEvent(); ev != nil {
					s.ids = append(s.ids, ev.GetEventId())
					s.seen[ev.GetEventId()]++
					s.cursor = ev.GetCursor()
				} else if hb := res.GetHeartbeat(); hb != nil && hb.GetCursor() != "" {
					s.cursor = hb.GetCursor()
				}
				s.mu.Unlock()
			}
		}
		if ctx.Err() != nil {
			return
		}
		s.mu.Lock()
		s.reconnects++
		if c := status.Code(err); c != codes.Unavailable && c != codes.Canceled {
			s.errs = append(s.errs, err.Error())
		}
		s.mu.Unlock()
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *subscriber) snapshot() ([]string, map[string]int, int, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := make(map[string]int, len(s.seen))
	for k, v := range s.seen {
		seen[k] = v
	}
	return append([]string(nil), s.ids...), seen, s.reconnects, append([]string(nil), s.errs...)
}

// streamIDs are the ids of the events in the tenant's stream that a tenant
// API key may read (categories budget, reservation, tenant), oldest first.
func streamIDs(t *testing.T, rc redis.UniversalClient, tenant string) []string {
	t.Helper()
	msgs, err := rc.XRange(context.Background(), keys.Tenant(tenant).Events(), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range msgs {
		switch m.Values["cat"] {
		case "budget", "reservation", "tenant":
			out = append(out, fmt.Sprint(m.Values["id"]))
		}
	}
	return out
}

// TestCyclesdKilledUnderLoad: cyclesd is SIGKILLed in the middle of a
// reserve / commit (some over the estimate, which emits events) / release /
// abandon (short TTL) load, stays down while abandoned reservations come
// due, and is restarted on the same address. Nothing acknowledged is lost
// and nothing happens twice; the new process's sweeper expires everything
// that came due while no sweeper ran (one reservation.expired event each);
// and a subscriber that lost its stream at the kill resumes from its last
// cursor and ends up with exactly the tenant's event log, in order, with no
// duplicates.
func TestCyclesdKilledUnderLoad(t *testing.T) {
	srv := redistest.Start(t)
	rc := srv.Client(t)
	d := cyclesdtest.Start(t, binary, srv.Addr, "-sweeper-interval", "200ms", "-event-heartbeat", "300ms", "-health-interval", "100ms")
	d.WaitServing(t)
	conn := d.Conn(t)
	const tenant = "crash-daemon"
	key := cyclesdtest.Provision(t, conn, tenant,
		cyclesdtest.Budget{Allocated: 1 << 50}, cyclesdtest.Budget{ScopePath: "tenant:" + tenant + "/workspace:w", Allocated: 1 << 50})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sub := &subscriber{client: cyclesv1.NewEventServiceClient(conn), key: key, seen: map[string]int{}}
	subDone := make(chan struct{})
	go func() { sub.run(ctx); close(subDone) }()

	l := newLoad(conn, key, tenant, func(r *rand.Rand) settle {
		switch n := r.IntN(10); {
		case n < 4:
			return commitOver
		case n < 6:
			return commitUnder
		case n < 8:
			return release
		default:
			return abandon
		}
	})
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { l.run(4, stop); close(done) }()

	time.Sleep(phase)
	beforeKill, _, _, _ := sub.snapshot()
	d.Kill()
	killedAt := time.Now()
	time.Sleep(phase) // abandoned reservations come due; no sweeper runs
	unavailable := l.unavailable.Load()
	d.Restart(t)
	d.WaitServing(t)
	restartedAt := time.Now()
	time.Sleep(phase)
	close(stop)
	<-done
	l.retryPending(t)
	l.check(t)
	if unavailable == 0 {
		t.Error("no UNAVAILABLE answers while cyclesd was down")
	}

	// The new process's sweeper expires every abandoned reservation,
	// including those that came due while no cyclesd ran.
	tn := keys.Tenant(tenant)
	if n, err := ledgertest.AwaitNoneActive(context.Background(), rc, tenant, 20*time.Second, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	} else if n > 0 {
		t.Fatalf("%d reservations still ACTIVE 20 s after the restart: the sweeper did not resume", n)
	}
	var dueDuringOutage, expiredByNew int
	for _, r := range l.resvs {
		if r.plan != abandon || r.rid == "" {
			continue
		}
		rec, _ := rc.HGetAll(context.Background(), tn.Reservation(r.rid)).Result()
		exp, _ := strconv.ParseInt(rec["expires_at"], 10, 64)
		expiredAt, _ := strconv.ParseInt(rec["expired_at"], 10, 64)
		if exp > killedAt.UnixMilli() && exp < restartedAt.UnixMilli()-100 {
			dueDuringOutage++
			if rec["state"] == "EXPIRED" && expiredAt >= restartedAt.UnixMilli()-2000 {
				expiredByNew++
			}
		}
	}
	if dueDuringOutage == 0 || expiredByNew != dueDuringOutage {
		t.Errorf("%d reservations came due during the outage, %d were expired by the restarted sweeper", dueDuringOutage, expiredByNew)
	}
	status, err := cyclesv1.NewOpsServiceClient(conn).GetSweeperStatus(cyclesdtest.AdminCtx(context.Background()), &cyclesv1.GetSweeperStatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if status.GetTotals().GetExpired() == 0 {
		t.Errorf("the restarted sweeper reports no expiries: %v", status)
	}
	l.verify(t, rc, true)
	expiredEvents := map[string]int{}
	msgs, err := rc.XRange(context.Background(), tn.Events(), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if m.Values["type"] == "reservation.expired" {
			var data struct {
				ReservationID string `json:"reservation_id"`
			}
			if err := json.Unmarshal([]byte(fmt.Sprint(m.Values["data"])), &data); err != nil {
				t.Fatal(err)
			}
			expiredEvents[data.ReservationID]++
		}
	}
	for _, r := range l.resvs {
		if r.rid == "" {
			continue
		}
		state, _ := rc.HGet(context.Background(), tn.Reservation(r.rid), "state").Result()
		if n := expiredEvents[r.rid]; (state == "EXPIRED") != (n == 1) || n > 1 {
			t.Errorf("reservation %s (%s) has %d reservation.expired events", r.rid, state, n)
		}
	}

	// Exactly one reservation.expired event per EXPIRED reservation, and the
	// subscriber has the whole log, in order, once.
	want := streamIDs(t, rc, tenant)
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, seen, reconnects, errs := sub.snapshot()
		if len(got) >= len(want) || time.Now().After(deadline) {
			for i := range want {
				if i >= len(got) || got[i] != want[i] {
					lo, hi := max(0, i-3), min(len(want), i+4)
					t.Fatalf("subscriber received %d events, the log holds %d; first difference at %d: log %q, received %q (%d before the kill, %d reconnects)",
						len(got), len(want), i, want[lo:hi], got[lo:min(len(got), hi)], len(beforeKill), reconnects)
				}
			}
			if len(got) != len(want) {
				t.Fatalf("subscriber received %d events, the log holds %d", len(got), len(want))
			}
			for id, n := range seen {
				if n != 1 {
					t.Errorf("event %s delivered %d times", id, n)
				}
			}
			if reconnects == 0 || len(beforeKill) == 0 || len(got) == len(beforeKill) {
				t.Errorf("the subscriber must have read events before the kill (%d), reconnected (%d) and read more after (%d)",
					len(beforeKill), reconnects, len(got))
			}
			for _, e := range errs {
				t.Errorf("subscriber: %s", e)
			}
			t.Logf("subscriber: %d events (%d before the kill), %d reconnects; %d came due during the outage",
				len(got), len(beforeKill), reconnects, dueDuringOutage)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	<-subDone
}
