package sweeper

import (
	"context"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"

	"github.com/cyclesgo/cycles-go/internal/telemetry/telemetrytest"
	"github.com/cyclesgo/cycles-go/test/redistest"
)

// loseReplies is a go-redis hook that lets every expire-batch call run in
// Redis and then, for the calls drop picks, throws the reply away and
// answers a read timeout: what a client sees when a batch outlives its call
// deadline (the script still runs to the end inside Redis). It counts the
// calls of each tenant by their deadline-index key.
type loseReplies struct {
	mu    sync.Mutex
	calls map[string]int // deadline key -> expire-batch calls so far
	lost  int
	drop  func(call int) bool // call: 1 for a tenant's first call
}

func (h *loseReplies) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *loseReplies) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *loseReplies) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		deadlines := expireBatchIndex(cmd)
		if err != nil || deadlines == "" {
			return err
		}
		h.mu.Lock()
		h.calls[deadlines]++
		lose := h.drop(h.calls[deadlines])
		if lose {
			h.lost++
		}
		h.mu.Unlock()
		if !lose {
			return nil
		}
		timeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
		cmd.SetErr(timeout)
		return timeout
	}
}

// expireBatchIndex is the deadline-index key of an expire-batch call (the
// only script of these tests whose KEYS name one), or "".
func expireBatchIndex(cmd redis.Cmder) string {
	name := strings.ToLower(cmd.Name())
	if name != "evalsha" && name != "eval" && name != "fcall" {
		return ""
	}
	for _, a := range cmd.Args() {
		if s, ok := a.(string); ok && strings.HasSuffix(s, ":r:deadline") {
			return s
		}
	}
	return ""
}

// A batch whose reply is lost (the client timed out while the script ran on
// to the end) neither fails the sweep nor loses its outcome: the drain
// retries, nothing is expired or announced twice, and the counts the sweep
// returns, Status and the outcome counter are exact. This is the bench's
// backlog cell in small (cmd/cycles-bench backlog.go: 1,000-entry calls
// outliving the call timeout made TriggerSweep answer UNAVAILABLE, and with a
// retry the counts summed to 95,000 of 100,000 expired).
func TestSweepCountsBatchesWhoseReplyWasLost(t *testing.T) {
	for _, tc := range []struct {
		name string
		drop func(call int) bool
	}{
		{"first call of each tenant", func(call int) bool { return call == 1 }},
		{"every other call", func(call int) bool { return call%2 == 1 }},
		{"two in a row", func(call int) bool { return call%3 != 0 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := redistest.Start(t).Client(t)
			var tenants []*seeded
			for i, n := range []int{450, 300, 7} {
				tenants = append(tenants, seedDue(t, c, n, int64(3+i)))
			}
			hook := &loseReplies{calls: map[string]int{}, drop: tc.drop}
			c.AddHook(hook)
			m := telemetrytest.New()
			sw := newSweeper(t, c, Options{BatchSize: 100, MeterProvider: m.Provider, Interval: time.Hour})

			got, err := sw.SweepOnce(context.Background())
			if err != nil {
				t.Fatalf("sweep: %v (after %d lost replies)", err, hook.lost)
			}
			if hook.lost < len(tenants) {
				t.Fatalf("only %d replies lost: the test did not test", hook.lost)
			}
			if want := (Counts{Expired: 757}); got != want {
				t.Fatalf("sweep counted %+v, want %+v (%d replies lost)", got, want, hook.lost)
			}
			if st := sw.Status(); st.LastRun != got || st.Totals != got || st.Backlog != 757 || st.LastError != "" {
				t.Fatalf("status %+v", st)
			}
			if n := m.Sum(t, "cycles.sweeper.outcomes", attribute.String("outcome", OutcomeExpired)); n != 757 {
				t.Fatalf("expired counter %d, want 757", n)
			}
			for _, s := range tenants {
				s.checkAllExpired(t) // once each, one event each, budgets exact
			}
		})
	}
}

// When every call of a tenant loses its reply, the drain gives up after
// CallAttempts tries and the sweep reports the error; what did run is still
// in the index's state (expired once), and the next sweep counts nothing
// twice.
func TestSweepGivesUpOnAStalledTenant(t *testing.T) {
	c := redistest.Start(t).Client(t)
	s := seedDue(t, c, 40, 5)
	hook := &loseReplies{calls: map[string]int{}, drop: func(int) bool { return true }}
	c.AddHook(hook)
	sw := newSweeper(t, c, Options{BatchSize: 10, CallAttempts: 3, Interval: time.Hour})
	if _, err := sw.SweepOnce(context.Background()); err == nil {
		t.Fatal("sweep with every reply lost: no error")
	}
	if hook.lost != 3 {
		t.Fatalf("%d calls, want CallAttempts = 3", hook.lost)
	}
	hook.mu.Lock()
	hook.drop = func(int) bool { return false }
	hook.mu.Unlock()
	// The lost calls ran: what they expired left the index. This drain has
	// a tally of its own and counts only what they left.
	left := c.ZCard(context.Background(), s.k.Deadlines()).Val()
	if left == 0 || left == 40 {
		t.Fatalf("%d of 40 left due after three lost calls of at most 10", left)
	}
	got, err := sw.SweepOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got != (Counts{Expired: left}) {
		t.Fatalf("second sweep counted %+v, want the %d the lost calls left", got, left)
	}
	s.checkAllExpired(t)
}
