package sweeper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"

	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/telemetry/telemetrytest"
	"github.com/cyclesgo/cycles-go/test/redistest"
	"github.com/cyclesgo/cycles-go/test/scripttest"
)

// seeded is a tenant with n due reservations on 3 budgeted scopes.
type seeded struct {
	*fixture
	ids     []string
	budgets []string
	alloc   int64
}

// seedDue registers a tenant and seeds n due reservations of estimate est
// (pipelined), with budgets holding exactly their sum as reserved.
func seedDue(t testing.TB, c redis.UniversalClient, n int, est int64) *seeded {
	t.Helper()
	f := newFixture(t, c).register()
	now := f.redisNow()
	sc := f.scopes(3)
	s := &seeded{fixture: f, alloc: int64(n)*est + 1_000}
	for _, scope := range sc {
		s.budgets = append(s.budgets, f.budget(scope, "TOKENS", strconv.FormatInt(s.alloc, 10), strconv.FormatInt(int64(n)*est, 10)))
	}
	const chunk = 1000
	for lo := 0; lo < n; lo += chunk {
		p := c.Pipeline()
		for i := lo; i < n && i < lo+chunk; i++ {
			id := fmt.Sprintf("r%07d-%s", i, randHex(3))
			s.ids = append(s.ids, id)
			f.reservationTo(p, resv{ID: id, Estimate: strconv.FormatInt(est, 10), Budgeted: sc,
				CreatedAt: now - 70_000, ExpiresAt: now - 10_000 - int64(i%5000), GraceMs: 5_000})
		}
		if _, err := p.Exec(f.ctx); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// checkAllExpired asserts every seeded reservation is EXPIRED, unindexed, the
// budgets are back to reserved 0 / remaining = allocated exactly, and the
// stream holds exactly one reservation.expired event per reservation.
func (s *seeded) checkAllExpired(t testing.TB) {
	t.Helper()
	p := s.c.Pipeline()
	cmds := make([]*redis.StringCmd, len(s.ids))
	for i, id := range s.ids {
		cmds[i] = p.HGet(s.ctx, s.k.Reservation(id), "state")
	}
	if _, err := p.Exec(s.ctx); err != nil {
		t.Fatal(err)
	}
	for i, c := range cmds {
		if c.Val() != "EXPIRED" {
			t.Fatalf("%s: state %q", s.ids[i], c.Val())
		}
	}
	if n := s.c.ZCard(s.ctx, s.k.Deadlines()).Val(); n != 0 {
		t.Fatalf("%d entries left in the deadline index", n)
	}
	for _, b := range s.budgets {
		if res, rem := s.ledger(b); res != "0" || rem != strconv.FormatInt(s.alloc, 10) {
			t.Fatalf("%s: reserved=%s remaining=%s, want 0 and %d", b, res, rem, s.alloc)
		}
		s.checkInvariant(b)
	}
	seen := map[string]bool{}
	evIDs := map[string]bool{}
	start := "-"
	for {
		msgs, err := s.c.XRangeN(s.ctx, s.k.Events(), start, "+", 5000).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if m.Values["type"] != "reservation.expired" {
				t.Fatalf("unexpected event %v", m.Values)
			}
			var data struct {
				ID string `json:"reservation_id"`
			}
			if err := json.Unmarshal([]byte(m.Values["data"].(string)), &data); err != nil {
				t.Fatal(err)
			}
			id := data.ID
			if seen[id] {
				t.Fatalf("two events for %s", id)
			}
			seen[id] = true
			eid := m.Values["id"].(string)
			if evIDs[eid] {
				t.Fatalf("duplicate event id %s", eid)
			}
			evIDs[eid] = true
		}
		if len(msgs) < 5000 {
			break
		}
		start = "(" + msgs[len(msgs)-1].ID
	}
	if len(seen) != len(s.ids) {
		t.Fatalf("%d events for %d expiries", len(seen), len(s.ids))
	}
}

func newSweeper(t testing.TB, c redis.UniversalClient, opts Options) *Sweeper {
	t.Helper()
	ex := scripttest.On(t, c)
	return New(ex, opts)
}

// Property 1 and 3: one sweep visits every registered tenant and drains each
// completely, batch after batch, without waiting an interval in between.
func TestSweepOnceDrainsEveryTenant(t *testing.T) {
	c := redistest.Start(t).Client(t)
	big := seedDue(t, c, 2_345, 7)
	small := seedDue(t, c, 3, 11)
	newFixture(t, c).register() // a tenant with nothing due
	m := telemetrytest.New()
	sw := newSweeper(t, c, Options{BatchSize: 1000, TenantPage: 2, MeterProvider: m.Provider, Interval: time.Hour})

	got, err := sw.SweepOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got != (Counts{Expired: 2_348}) {
		t.Fatalf("counts %+v", got)
	}
	big.checkAllExpired(t)
	small.checkAllExpired(t)
	st := sw.Status()
	if st.Backlog != 2_348 || st.LastRun != got || st.Totals != got || st.LastRunStarted.IsZero() || st.LastError != "" {
		t.Fatalf("status %+v", st)
	}
	if n := m.Sum(t, "cycles.sweeper.outcomes", attribute.String("outcome", OutcomeExpired)); n != 2_348 {
		t.Fatalf("expired counter %d", n)
	}
	// At least 3 batches for the big tenant (more when a call reaches its
	// time budget, BatchTime, first), 1 for each other tenant.
	if n := m.Sum(t, "cycles.sweeper.batches"); n < 5 {
		t.Fatalf("batches %d, want 5 or more", n)
	}
	if n := m.Sum(t, "cycles.sweeper.sweeps"); n != 1 {
		t.Fatalf("sweeps %d", n)
	}
	// A second sweep finds nothing; totals keep the first.
	if got, err := sw.SweepOnce(context.Background()); err != nil || got != (Counts{}) {
		t.Fatalf("second sweep %+v %v", got, err)
	}
	if st := sw.Status(); st.Totals.Expired != 2_348 || st.LastRun != (Counts{}) || st.Backlog != 0 {
		t.Fatalf("status after idle sweep %+v", st)
	}
}

// Every outcome has a counter and a Status total that move.
func TestSweepCountsEachOutcome(t *testing.T) {
	c := redistest.Start(t).Client(t)
	f := newFixture(t, c).register()
	now := f.redisNow()
	sc := f.scopes(1)
	f.budget(sc[0], "TOKENS", "1000", "200")
	f.reservation(resv{Estimate: "100", Budgeted: sc, CreatedAt: now - 9000, ExpiresAt: now - 5000})                                    // expired
	f.reservation(resv{State: "COMMITTED", Estimate: "100", Budgeted: sc, CreatedAt: now - 9000, ExpiresAt: now - 5000})                // skipped
	f.reservation(resv{Estimate: "100", Budgeted: sc, CreatedAt: now - 9000, ExpiresAt: now + 60_000, GraceMs: 0, Score: ptr(now - 1)}) // in grace
	f.c.ZAdd(f.ctx, f.k.Deadlines(), redis.Z{Score: float64(now - 1), Member: "gone"})                                                  // not found
	f.reservation(resv{Estimate: "oops", Budgeted: sc, CreatedAt: now - 9000, ExpiresAt: now - 5000})                                   // quarantined

	m := telemetrytest.New()
	sw := newSweeper(t, c, Options{MeterProvider: m.Provider})
	got, err := sw.SweepOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := Counts{Expired: 1, Skipped: 1, InGrace: 1, NotFound: 1, Quarantined: 1}
	if got != want || sw.Status().Totals != want {
		t.Fatalf("counts %+v, status %+v", got, sw.Status())
	}
	for _, o := range []string{OutcomeExpired, OutcomeSkipped, OutcomeInGrace, OutcomeNotFound, OutcomeQuarantined} {
		if n := m.Sum(t, "cycles.sweeper.outcomes", attribute.String("outcome", o)); n != 1 {
			t.Errorf("outcome %s counter = %d, want 1", o, n)
		}
	}
}

// Property 2: two sweepers (two cyclesd processes: own clients, own
// executors) racing over 10,000 due reservations expire each exactly once.
func TestTwoSweepersExpireEachReservationOnce(t *testing.T) {
	srv := redistest.Start(t)
	var tenants []*seeded
	for i := 0; i < 10; i++ {
		tenants = append(tenants, seedDue(t, srv.Client(t), 1_000, 3))
	}
	var sweepers []*Sweeper
	for i := 0; i < 2; i++ {
		// Small batches and several workers maximise interleaving.
		sweepers = append(sweepers, newSweeper(t, srv.Client(t), Options{BatchSize: 50, Workers: 4}))
	}
	var wg sync.WaitGroup
	results := make([]Counts, len(sweepers))
	errs := make([]error, len(sweepers))
	for i, sw := range sweepers {
		wg.Go(func() {
			results[i], errs[i] = sw.SweepOnce(context.Background())
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	total := results[0].Add(results[1])
	if total.Expired != 10_000 {
		t.Fatalf("expired %d in total (%+v / %+v), want exactly 10,000", total.Expired, results[0], results[1])
	}
	t.Logf("sweeper A expired %d, sweeper B %d, skipped %d", results[0].Expired, results[1].Expired, total.Skipped)
	for _, s := range tenants {
		s.checkAllExpired(t)
	}
}

// Property 2 against settlement: a release racing the sweeper (the release
// path refunds too) refunds each reservation exactly once. The release here is
// a stand-in with the ledger's release arithmetic (state check, refund, ZREM),
// run as one script, without the time check so that it contends for already
// due reservations.
func TestSweepRacingReleaseRefundsOnce(t *testing.T) {
	srv := redistest.Start(t)
	s := seedDue(t, srv.Client(t), 2_000, 5)
	release := redis.NewScript(`
local r = redis.call('HMGET', KEYS[1], 'state', 'estimate')
if r[1] ~= 'ACTIVE' then return 0 end
for i = 3, #KEYS do
  local st, rem, res, tail = string.match(redis.call('HGET', KEYS[i], 'bal'), '^([^:]*):([^:]*):([^:]*):(.*)$')
  redis.call('HSET', KEYS[i], 'bal', st .. ':' .. string.format('%d', rem + r[2]) .. ':' .. string.format('%d', res - r[2]) .. ':' .. tail)
end
redis.call('HSET', KEYS[1], 'state', 'RELEASED', 'finalized_at', '1')
redis.call('ZREM', KEYS[2], ARGV[1])
return 1`)
	// Batches of one and two releasers walking the index in the sweeper's
	// order make them collide on the same reservations.
	sw := newSweeper(t, srv.Client(t), Options{BatchSize: 1})
	var released atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 2; w++ {
		rc := srv.Client(t)
		wg.Go(func() {
			for i := len(s.ids) - 1 - w; i >= 0; i -= 2 {
				id := s.ids[i]
				ks := append([]string{s.k.Reservation(id), s.k.Deadlines()}, s.budgets...)
				n, err := release.Run(s.ctx, rc, ks, id).Int64()
				if err != nil {
					t.Error(err)
					return
				}
				released.Add(n)
			}
		})
	}
	got, err := sw.SweepOnce(context.Background())
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if got.Expired+released.Load() != 2_000 {
		t.Fatalf("expired %d + released %d != 2,000", got.Expired, released.Load())
	}
	t.Logf("expired %d, released %d, skipped %d", got.Expired, released.Load(), got.Skipped)
	if got.Expired == 0 || released.Load() == 0 {
		t.Fatal("no contention: one side did all the work")
	}
	for _, b := range s.budgets {
		if res, rem := s.ledger(b); res != "0" || rem != strconv.FormatInt(s.alloc, 10) {
			t.Fatalf("%s: reserved=%s remaining=%s (a double refund shows as remaining > allocated)", b, res, rem)
		}
	}
	if n := s.c.XLen(s.ctx, s.k.Events()).Val(); n != got.Expired {
		t.Fatalf("%d events for %d expiries", n, got.Expired)
	}
}

// Property 1 on Redis Cluster: tenants spread over the masters' slots are all
// found through the registry (its own slot) and drained.
func TestSweepOnCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3).Client(t)
	var tenants []*seeded
	slots := map[int64]bool{}
	for i := 0; i < 12; i++ {
		s := seedDue(t, cl, 120, 2)
		tenants = append(tenants, s)
		slot, err := cl.ClusterKeySlot(s.ctx, s.k.Deadlines()).Result()
		if err != nil {
			t.Fatal(err)
		}
		slots[slot] = true
	}
	sw := newSweeper(t, cl, Options{BatchSize: 50})
	got, err := sw.SweepOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got.Expired != 12*120 {
		t.Fatalf("expired %d", got.Expired)
	}
	for _, s := range tenants {
		s.checkAllExpired(t)
	}
	t.Logf("%d tenants over %d slots", len(tenants), len(slots))
}

// Run sweeps on its own, reports itself in Status, and returns nil on cancel.
func TestRunLoop(t *testing.T) {
	c := redistest.Start(t).Client(t)
	sw := newSweeper(t, c, Options{Interval: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sw.Run(ctx) }()

	s := seedDue(t, c, 30, 1) // seeded after Run started: a later sweep picks it up
	deadline := time.Now().Add(10 * time.Second)
	for sw.Status().Totals.Expired < 30 {
		if time.Now().After(deadline) {
			t.Fatalf("not swept: %+v", sw.Status())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !sw.Status().Running {
		t.Fatal("status does not show the running loop")
	}
	s.checkAllExpired(t)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run returned %v", err)
	}
	if sw.Status().Running {
		t.Fatal("still shown as running")
	}
}

// A failing store is reported (error, counter, LastError), not fatal.
func TestSweepReportsStoreErrors(t *testing.T) {
	srv := redistest.Start(t)
	m := telemetrytest.New()
	sw := newSweeper(t, srv.Client(t), Options{MeterProvider: m.Provider})
	srv.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := sw.SweepOnce(ctx); err == nil {
		t.Fatal("no error with Redis down")
	}
	if m.Sum(t, "cycles.sweeper.errors") == 0 || sw.Status().LastError == "" {
		t.Fatalf("error not reported: %+v", sw.Status())
	}
}

// Property 7: the expired record stays readable for 30 days with what it held.
func TestExpiredRecordIsAnAuditTrail(t *testing.T) {
	c := redistest.Start(t).Client(t)
	s := seedDue(t, c, 1, 42)
	sw := newSweeper(t, c, Options{})
	if _, err := sw.SweepOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	rec := s.hgetall(s.k.Reservation(s.ids[0]))
	for _, f := range []string{"unit", "estimate", "scope_path", "budgeted", "created_at", "expires_at", "grace_ms", "expired_at", "subject", "action"} {
		if rec[f] == "" {
			t.Errorf("field %s lost: %v", f, rec)
		}
	}
	if rec["state"] != "EXPIRED" || rec["estimate"] != "42" {
		t.Fatalf("record %v", rec)
	}
	ttl := c.PTTL(s.ctx, s.k.Reservation(s.ids[0])).Val()
	if ttl < time.Duration(keys.TerminalRetentionMs-60_000)*time.Millisecond {
		t.Fatalf("TTL %v, want 30 days", ttl)
	}
}
