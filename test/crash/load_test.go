package crash

import (
	"context"
	"fmt"
	"math/big"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/test/crash/cyclesdtest"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
)

// settle is what a worker does with a reservation after reserving it.
type settle int

const (
	commitUnder settle = iota // actual below the estimate
	commitOver                // actual above the estimate (a commit_overage event)
	release
	abandon // short TTL, never settled: the sweeper must expire it
)

// reservation is one reserve the load issued, and what became of it.
type reservation struct {
	key       string
	req       *cyclesv1.CreateReservationRequest
	plan      settle
	rid       string
	acked     bool // the first attempt was answered OK (not only a retry)
	reserveAt time.Time

	settleKey string
	actual    int64
	charged   int64
	settled   bool // commit/release answered OK (first attempt or retry)
	settleAck bool // ... on its first attempt
}

// load drives reserve/commit/release from several workers through one
// cyclesd and records every answer: OK, UNAVAILABLE (to retry later with the
// same key), or anything else, which is a wrong answer.
type load struct {
	runtime cyclesv1.RuntimeServiceClient
	key     string
	tenant  string
	mix     func(r *rand.Rand) settle

	mu          sync.Mutex
	resvs       []*reservation
	pendingRes  []*reservation // reserve answered UNAVAILABLE
	pendingSet  []*reservation // commit/release answered UNAVAILABLE
	wrong       []string
	ok          atomic.Int64
	unavailable atomic.Int64
}

func newLoad(conn *grpc.ClientConn, key, tenant string, mix func(*rand.Rand) settle) *load {
	return &load{runtime: cyclesv1.NewRuntimeServiceClient(conn), key: key, tenant: tenant, mix: mix}
}

func (l *load) wrongf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.wrong = append(l.wrong, fmt.Sprintf(format, args...))
}

// classify returns true for OK, records UNAVAILABLE, and flags the rest.
func (l *load) classify(what string, err error) (ok bool, unavailable bool) {
	if err == nil {
		l.ok.Add(1)
		return true, false
	}
	if status.Code(err) == codes.Unavailable {
		l.unavailable.Add(1)
		return false, true
	}
	l.wrongf("%s: %v (want OK or UNAVAILABLE)", what, err)
	return false, false
}

// run starts workers until stop is closed and waits for them.
func (l *load) run(workers int, stop <-chan struct{}) {
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if !l.one(rng, fmt.Sprintf("w%d-%d", w, i), w) {
					// Something is down: back off like a client would.
					time.Sleep(50 * time.Millisecond)
				}
				time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
			}
		}(w)
	}
	wg.Wait()
}

func (l *load) call() (context.Context, context.CancelFunc) {
	return context.WithTimeout(cyclesdtest.KeyCtx(context.Background(), l.key), 5*time.Second)
}

// one reserves and settles one reservation; false when an answer was
// UNAVAILABLE.
func (l *load) one(rng *rand.Rand, id string, worker int) bool {
	plan := l.mix(rng)
	ttl, grace := int64(60_000), int64(0)
	if plan == abandon {
		ttl = 1000
	}
	r := &reservation{key: "r-" + id, plan: plan, reserveAt: time.Now(), settleKey: "s-" + id}
	r.req = &cyclesv1.CreateReservationRequest{
		IdempotencyKey: r.key,
		Subject:        &cyclesv1.Subject{Workspace: "w", Agent: fmt.Sprintf("a%d", worker)},
		Action:         &cyclesv1.Action{Kind: "llm.completion", Name: "m"},
		Estimate:       &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 100 + rng.Int64N(900)},
		TtlMs:          &ttl, GracePeriodMs: &grace,
	}
	switch plan {
	case commitUnder:
		r.actual = rng.Int64N(r.req.Estimate.Amount + 1)
	case commitOver:
		r.actual = r.req.Estimate.Amount + 1 + rng.Int64N(500)
	}
	l.mu.Lock()
	l.resvs = append(l.resvs, r)
	l.mu.Unlock()
	ctx, cancel := l.call()
	res, err := l.runtime.CreateReservation(ctx, r.req)
	cancel()
	ok, unavailable := l.classify("reserve "+r.key, err)
	switch {
	case unavailable:
		l.mu.Lock()
		l.pendingRes = append(l.pendingRes, r)
		l.mu.Unlock()
		return false
	case !ok:
		return true
	}
	l.reserved(r, res)
	r.acked = true
	return l.settle(r, true)
}

func (l *load) reserved(r *reservation, res *cyclesv1.CreateReservationResponse) {
	if res.GetReservationId() == "" || res.GetReserved().GetAmount() != r.req.GetEstimate().GetAmount() {
		l.wrongf("reserve %s answered %v", r.key, res)
	}
	l.mu.Lock()
	r.rid = res.GetReservationId()
	l.mu.Unlock()
}

// settle commits or releases r (abandoned reservations are left alone).
func (l *load) settle(r *reservation, first bool) bool {
	if r.plan == abandon {
		return true
	}
	ctx, cancel := l.call()
	defer cancel()
	var err error
	switch r.plan {
	case release:
		var res *cyclesv1.ReleaseReservationResponse
		res, err = l.runtime.ReleaseReservation(ctx, &cyclesv1.ReleaseReservationRequest{ReservationId: r.rid, IdempotencyKey: r.settleKey})
		if err == nil && res.GetReleased().GetAmount() != r.req.GetEstimate().GetAmount() {
			l.wrongf("release %s released %v", r.rid, res.GetReleased())
		}
	default:
		var res *cyclesv1.CommitReservationResponse
		res, err = l.runtime.CommitReservation(ctx, &cyclesv1.CommitReservationRequest{ReservationId: r.rid, IdempotencyKey: r.settleKey,
			Actual: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: r.actual}})
		// Budgets are ample: every commit charges exactly its actual.
		if err == nil && res.GetCharged().GetAmount() != r.actual {
			l.wrongf("commit %s of %d charged %v", r.rid, r.actual, res.GetCharged())
		}
		if err == nil {
			l.mu.Lock()
			r.charged = res.GetCharged().GetAmount()
			l.mu.Unlock()
		}
	}
	ok, unavailable := l.classify(fmt.Sprintf("settle %s (%v)", r.rid, r.plan), err)
	switch {
	case ok:
		l.mu.Lock()
		r.settled, r.settleAck = true, first
		l.mu.Unlock()
	case unavailable && first:
		l.mu.Lock()
		l.pendingSet = append(l.pendingSet, r)
		l.mu.Unlock()
	}
	return ok
}

// retryPending re-sends every request that was answered UNAVAILABLE, with
// its idempotency key, until it succeeds: each must take effect exactly once
// whether or not the first attempt reached Redis.
func (l *load) retryPending(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, r := range l.pendingRes {
		for {
			ctx, cancel := l.call()
			res, err := l.runtime.CreateReservation(ctx, r.req)
			cancel()
			if err == nil {
				l.reserved(r, res)
				l.settleUntilDone(t, r, deadline)
				break
			}
			if status.Code(err) != codes.Unavailable {
				l.wrongf("retry of reserve %s: %v", r.key, err)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("retry of reserve %s still UNAVAILABLE: %v", r.key, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for _, r := range l.pendingSet {
		l.settleUntilDone(t, r, deadline)
	}
}

func (l *load) settleUntilDone(t *testing.T, r *reservation, deadline time.Time) {
	t.Helper()
	for !l.settle(r, false) {
		if time.Now().After(deadline) {
			t.Fatalf("settling %s never succeeded", r.rid)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (l *load) check(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, w := range l.wrong {
		t.Error("wrong answer: " + w)
	}
}

// verify checks Redis against everything the clients were told: every
// acknowledged reserve has its record, every acknowledged settlement its
// terminal state, the ledger invariants hold, and the budgets charged
// exactly the sum of the commits (so nothing happened twice).
func (l *load) verify(t *testing.T, rc redis.UniversalClient, expiredOK bool) {
	t.Helper()
	ctx := context.Background()
	tn := keys.Tenant(l.tenant)
	l.mu.Lock()
	defer l.mu.Unlock()
	spent := new(big.Int)
	reserved := new(big.Int)
	known := map[string]bool{}
	var states = map[string]int{}
	for _, r := range l.resvs {
		if r.rid == "" {
			continue // never answered OK (a wrong answer, already reported)
		}
		known[r.rid] = true
		rec, err := rc.HGetAll(ctx, tn.Reservation(r.rid)).Result()
		if err != nil {
			t.Fatal(err)
		}
		state := rec["state"]
		states[state]++
		switch {
		case len(rec) == 0:
			t.Errorf("reservation %s (key %s, acked %v) is gone", r.rid, r.key, r.acked)
		case r.settled && r.plan == release && state != "RELEASED",
			r.settled && (r.plan == commitUnder || r.plan == commitOver) && (state != "COMMITTED" || rec["charged"] != fmt.Sprint(r.charged)):
			t.Errorf("reservation %s settled (%v, acked %v) but the record says %s charged %s", r.rid, r.plan, r.settleAck, state, rec["charged"])
		case r.plan == abandon && state != "ACTIVE" && state != "EXPIRED":
			t.Errorf("abandoned reservation %s is %s", r.rid, state)
		case r.plan == abandon && state == "EXPIRED" && !expiredOK:
			t.Errorf("reservation %s expired unexpectedly", r.rid)
		}
		if state == "COMMITTED" {
			spent.Add(spent, big.NewInt(r.charged))
		}
		if state == "ACTIVE" {
			reserved.Add(reserved, big.NewInt(r.req.GetEstimate().GetAmount()))
		}
	}
	// No record the clients were never told about (after the retries, every
	// reserve that reached Redis is known).
	ids, err := reservationIDs(ctx, rc, tn)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if !known[id] {
			t.Errorf("reservation record %s belongs to no reserve a client saw succeed", id)
		}
	}
	if len(ids) != len(known) {
		t.Errorf("%d reservation records for %d reservations", len(ids), len(known))
	}
	for _, v := range ledgertest.Violations(ctx, rc, l.tenant) {
		t.Errorf("ledger invariant: %s", v)
	}
	b := ledgertest.ReadBudget(t, rc, l.tenant, "tenant:"+l.tenant, "TOKENS")
	if b.Spent.Cmp(spent) != 0 || b.Reserved.Cmp(reserved) != 0 || b.Debt.Sign() != 0 {
		t.Errorf("tenant budget %s, want spent %s (sum of commits) and reserved %s (sum of ACTIVE)", b, spent, reserved)
	}
	keysSorted := make([]string, 0, len(states))
	for k := range states {
		keysSorted = append(keysSorted, k)
	}
	sort.Strings(keysSorted)
	var parts []string
	for _, k := range keysSorted {
		parts = append(parts, fmt.Sprintf("%s=%d", k, states[k]))
	}
	t.Logf("%d reservations (%s); %d OK answers, %d UNAVAILABLE, %d reserves and %d settlements retried",
		len(known), strings.Join(parts, " "), l.ok.Load(), l.unavailable.Load(), len(l.pendingRes), len(l.pendingSet))
}

// reservationIDs lists the tenant's reservation records.
func reservationIDs(ctx context.Context, rc redis.UniversalClient, tn keys.Tenant) ([]string, error) {
	pattern := strings.NewReplacer("{", `\{`, "}", `\}`).Replace(tn.Prefix()) + "r:*"
	var out []string
	it := rc.Scan(ctx, 0, pattern, 1000).Iterator()
	for it.Next(ctx) {
		k := it.Val()
		if k == tn.Deadlines() || k == tn.Created() || k == tn.Expires() {
			continue
		}
		out = append(out, strings.TrimPrefix(k, tn.Prefix()+"r:"))
	}
	return out, it.Err()
}
