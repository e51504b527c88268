package usage

import (
	"context"
	"fmt"
	"testing"
	"time"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/archive"
	"github.com/cyclesgo/cycles-go/internal/archiver"
	"github.com/cyclesgo/cycles-go/internal/ledger"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
	"github.com/cyclesgo/cycles-go/test/pgtest"
	"github.com/cyclesgo/cycles-go/test/redistest"
	"github.com/cyclesgo/cycles-go/test/scripttest"
)

func tokens(n int64) *cyclesv1.Amount {
	return &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: n}
}

// TestUsageEqualsLedger: after reserve, commit (under, at and over the
// estimate), release and denied traffic is archived, the report's totals
// over the range equal the ledger's own budget movements (spent = committed,
// allocated - remaining = committed once nothing is held), its counts equal
// the calls made, and grouping by scope prefix or by hour only splits the
// same totals.
func TestUsageEqualsLedger(t *testing.T) {
	ctx := context.Background()
	c := redistest.Start(t).Client(t)
	ex := scripttest.On(t, c)
	st, err := archive.Open(ctx, pgtest.SharedDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	const tn, alloc = "usage-t", 100_000
	ledgertest.SeedTenant(t, c, tn, ledgertest.Tenant{})
	ledgertest.SeedBudget(t, c, tn, ledgertest.Budget{Scope: "tenant:" + tn, Unit: "TOKENS", Allocated: alloc, OverdraftLimit: 1000})
	led := ledger.New(ex, ledger.Options{Archive: true})
	start := time.Now().Add(-time.Minute).UnixMilli()
	var committed, released, reservations, commits, releases int64
	for i := 0; i < 12; i++ {
		ws := []string{"prod", "dev", "ci"}[i%3]
		res, err := led.Reserve(ctx, tn, &cyclesv1.CreateReservationRequest{IdempotencyKey: fmt.Sprintf("u%d", i),
			Subject: &cyclesv1.Subject{Workspace: ws}, Action: &cyclesv1.Action{Kind: "llm.completion", Name: "m"},
			Estimate: tokens(int64(1000 + 10*i)), OveragePolicy: cyclesv1.CommitOveragePolicy_COMMIT_OVERAGE_POLICY_ALLOW_IF_AVAILABLE})
		if err != nil {
			t.Fatal(err)
		}
		reservations++
		id := res.GetReservationId()
		if i%4 == 3 {
			if _, err := led.Release(ctx, tn, &cyclesv1.ReleaseReservationRequest{ReservationId: id, IdempotencyKey: "r" + id}); err != nil {
				t.Fatal(err)
			}
			released += int64(1000 + 10*i)
			releases++
			continue
		}
		actual := int64(1000+10*i) + int64(i%3-1)*300 // under, at and over the estimate
		if _, err := led.Commit(ctx, tn, &cyclesv1.CommitReservationRequest{ReservationId: id, IdempotencyKey: "c" + id, Actual: tokens(actual)}); err != nil {
			t.Fatal(err)
		}
		committed += actual
		commits++
	}
	// Two denials (recorded as reservation.denied: dry runs asking more
	// than the budget holds), and a live refusal, which writes nothing.
	for i := 0; i < 2; i++ {
		res, err := led.Reserve(ctx, tn, &cyclesv1.CreateReservationRequest{IdempotencyKey: fmt.Sprintf("d%d", i),
			Subject: &cyclesv1.Subject{Workspace: "prod"}, Action: &cyclesv1.Action{Kind: "llm.completion", Name: "m"},
			Estimate: tokens(10 * alloc), DryRun: true})
		if err != nil || res.GetDecision() != cyclesv1.Decision_DECISION_DENY {
			t.Fatalf("denial %d: %v %v", i, res, err)
		}
	}
	if _, err := led.Reserve(ctx, tn, &cyclesv1.CreateReservationRequest{IdempotencyKey: "live",
		Subject: &cyclesv1.Subject{Workspace: "prod"}, Action: &cyclesv1.Action{Kind: "llm.completion", Name: "m"},
		Estimate: tokens(10 * alloc)}); !apierr.HasCode(err, apierr.BudgetExceeded) {
		t.Fatalf("live refusal: %v", err)
	}
	a, err := archiver.New(ex, st, archiver.ArchiverOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Once(ctx); err != nil {
		t.Fatal(err)
	}
	bal, err := led.Balances(ctx, tn, &cyclesv1.GetBalancesRequest{})
	if err != nil || len(bal.GetBalances()) != 1 {
		t.Fatalf("balances %v %v", bal, err)
	}
	b := bal.GetBalances()[0]
	if b.GetSpent().GetAmount() != committed || b.GetReserved().GetAmount() != 0 {
		t.Fatalf("ledger: spent %d reserved %d, test committed %d", b.GetSpent().GetAmount(), b.GetReserved().GetAmount(), committed)
	}
	svc := New(st)
	end := time.Now().Add(time.Minute).UnixMilli()
	for _, tc := range []struct {
		name   string
		req    *cyclesv1.QueryUsageRequest
		groups int
	}{
		{"by day, whole scope paths", &cyclesv1.QueryUsageRequest{TenantId: tn, FromMs: start, ToMs: end}, 3},
		{"by hour, tenant", &cyclesv1.QueryUsageRequest{TenantId: tn, FromMs: start, ToMs: end, Bucket: cyclesv1.UsageBucket_USAGE_BUCKET_HOUR, ScopeDepth: 1}, 1},
		{"tokens only, by workspace", &cyclesv1.QueryUsageRequest{TenantId: tn, FromMs: start, ToMs: end, ScopeDepth: 2, Unit: cyclesv1.Unit_UNIT_TOKENS}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := svc.QueryUsage(ctx, tc.req)
			if err != nil {
				t.Fatal(err)
			}
			var sum cyclesv1.UsageRow
			scopes := map[string]bool{}
			for _, r := range res.GetRows() {
				scopes[r.GetScope()] = true
				sum.Reserved += r.GetReserved()
				sum.Committed += r.GetCommitted()
				sum.Released += r.GetReleased()
				sum.Reservations += r.GetReservations()
				sum.Commits += r.GetCommits()
				sum.Releases += r.GetReleases()
				sum.Denials += r.GetDenials()
				sum.DebtIncurred += r.GetDebtIncurred()
			}
			if tc.groups > 0 && len(scopes) > tc.groups {
				t.Fatalf("%d scope groups %v, want at most %d", len(scopes), scopes, tc.groups)
			}
			if sum.Committed != b.GetSpent().GetAmount() || alloc-b.GetRemaining().GetAmount() != sum.Committed+b.GetDebt().GetAmount()-sum.DebtIncurred {
				t.Fatalf("committed %d (debt %d), ledger spent %d remaining %d debt %d", sum.Committed, sum.DebtIncurred,
					b.GetSpent().GetAmount(), b.GetRemaining().GetAmount(), b.GetDebt().GetAmount())
			}
			if sum.Released != released || sum.Reservations != reservations || sum.Commits != commits || sum.Releases != releases || sum.Denials != 2 {
				t.Fatalf("report %+v, want released %d, %d reservations, %d commits, %d releases, 2 denials",
					&sum, released, reservations, commits, releases)
			}
		})
	}
	// Outside the range: nothing.
	if res, err := svc.QueryUsage(ctx, &cyclesv1.QueryUsageRequest{TenantId: tn, FromMs: start - 7_200_000, ToMs: start - 3_600_000}); err != nil || len(res.GetRows()) != 0 {
		t.Fatalf("empty range: %v %v", res, err)
	}
	for _, bad := range []*cyclesv1.QueryUsageRequest{
		{FromMs: start, ToMs: end},
		{TenantId: tn, ToMs: end},
		{TenantId: tn, FromMs: end, ToMs: start},
		{TenantId: tn, FromMs: 1, ToMs: 1 + MaxRange.Milliseconds() + 1},
		{TenantId: tn, FromMs: start, ToMs: end, ScopePrefix: "tenant:other"},
	} {
		if _, err := svc.QueryUsage(ctx, bad); !apierr.HasCode(err, apierr.InvalidRequest) {
			t.Fatalf("%v: %v, want INVALID_REQUEST", bad, err)
		}
	}
}
