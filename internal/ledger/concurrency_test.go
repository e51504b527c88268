package ledger_test

import (
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/test/errtest"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
)

// atOnce runs f(0..n-1) on n goroutines released together, so the calls
// race as closely as the scheduler allows, and returns when all are done.
func atOnce(n int, f func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			f(i)
		})
	}
	close(start)
	wg.Wait()
}

// 200 concurrent reserves against budgets that fit exactly 100: exactly 100
// succeed, the rest are BUDGET_EXCEEDED, and the ledger is exact.
func TestConcurrentReservesNeverOversubscribe(t *testing.T) {
	const est, fits, callers = 37, 100, 200
	e := newFundedEnv(t, est*fits)
	e.budget(ledgertest.Budget{Scope: e.scope("workspace:prod"), Allocated: est*fits + 5_000})
	var mu sync.Mutex
	okIDs := map[string]bool{}
	other := 0
	atOnce(callers, func(i int) {
		r, err := e.reserve("c"+itoa(int64(i)), est)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err == nil:
			okIDs[r.ReservationId] = true
		case apierr.HasCode(err, apierr.BudgetExceeded):
		default:
			other++
			t.Errorf("caller %d: %v", i, err)
		}
	})
	if len(okIDs) != fits || other != 0 {
		t.Fatalf("%d succeeded (%d unexpected errors), want exactly %d", len(okIDs), other, fits)
	}
	top := e.state("")
	if top.Remaining.Int64() != 0 || top.Reserved.Int64() != est*fits {
		t.Fatalf("tenant scope: %s", top)
	}
	if ws := e.state("workspace:prod"); ws.Remaining.Int64() != 5_000 || ws.Reserved.Int64() != est*fits {
		t.Fatalf("workspace: %s", ws)
	}
	if n := e.m.Sum(t, "cycles.reservations.denied", attribute.String("reason", "BUDGET_EXCEEDED")); n != callers-fits {
		t.Fatalf("denied = %d", n)
	}
}

// Parallel retries of one idempotency key make exactly one reservation.
func TestConcurrentRetriesOfOneKey(t *testing.T) {
	const retries = 50
	e := newFundedEnv(t, 1000)
	got := make([]string, retries)
	atOnce(retries, func(i int) {
		r, err := e.reserve("one-key", 10)
		if err != nil {
			t.Errorf("retry %d: %v", i, err)
			return
		}
		got[i] = r.ReservationId
	})
	for i := range got {
		if got[i] != got[0] || got[0] == "" {
			t.Fatalf("retry %d got %q, first got %q", i, got[i], got[0])
		}
	}
	if st := e.state(""); st.Reserved.Int64() != 10 {
		t.Fatalf("reserved %s, want one hold of 10", st)
	}
	if c, r := e.m.Sum(t, "cycles.reservations.created"), e.m.Sum(t, "cycles.idempotency.replays"); c != 1 || r != retries-1 {
		t.Fatalf("created %d replays %d", c, r)
	}
}

// Commit racing release on the same reservation: exactly one wins, the other
// is RESERVATION_FINALIZED, and the ledger reflects exactly the winner.
func TestCommitRacingRelease(t *testing.T) {
	const n, est, actual = 60, 100, 70
	e := newFundedEnv(t, n*est)
	rids := make([]string, n)
	for i := range rids {
		rids[i] = e.mustReserve("r"+itoa(int64(i)), est).ReservationId
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	commits, releases := 0, 0
	start := make(chan struct{})
	// race runs op once start closes, reports its error on results and
	// counts a win in won.
	race := func(results chan<- error, won *int, op func() error) {
		defer wg.Done()
		<-start
		err := op()
		results <- err
		if err == nil {
			mu.Lock()
			*won++
			mu.Unlock()
		}
	}
	for _, rid := range rids {
		wg.Add(3)
		results := make(chan error, 2)
		go race(results, &commits, func() error { return errtest.ErrOf(e.commit(rid, "c", actual)) })
		go race(results, &releases, func() error { return errtest.ErrOf(e.release(rid, "r")) })
		go func() {
			defer wg.Done()
			a, b := <-results, <-results
			wins := 0
			for _, err := range []error{a, b} {
				switch {
				case err == nil:
					wins++
				case !apierr.HasCode(err, apierr.ReservationFinalized):
					t.Errorf("%s: loser got %v", rid, err)
				}
			}
			if wins != 1 {
				t.Errorf("%s: %d winners", rid, wins)
			}
		}()
	}
	close(start)
	wg.Wait()
	if commits+releases != n {
		t.Fatalf("commits %d + releases %d != %d", commits, releases, n)
	}
	st := e.state("")
	if st.Spent.Int64() != int64(commits*actual) || st.Reserved.Sign() != 0 || st.Remaining.Int64() != int64(n*est-commits*actual) {
		t.Fatalf("ledger %s after %d commits and %d releases", st, commits, releases)
	}
	var statuses = map[cyclesv1.ReservationStatus]int{}
	for _, rid := range rids {
		g, err := e.l.Get(ctx, e.tenant, &cyclesv1.GetReservationRequest{ReservationId: rid})
		if err != nil {
			t.Fatal(err)
		}
		statuses[g.GetReservation().GetStatus()]++
	}
	if statuses[cyclesv1.ReservationStatus_RESERVATION_STATUS_COMMITTED] != commits || statuses[cyclesv1.ReservationStatus_RESERVATION_STATUS_RELEASED] != releases {
		t.Fatalf("statuses %v vs %d/%d", statuses, commits, releases)
	}
}
