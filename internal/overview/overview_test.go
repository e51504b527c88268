package overview_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/overview"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
	"github.com/cyclesgo/cycles-go/test/redistest"
	"github.com/cyclesgo/cycles-go/test/scripttest"
)

func TestMain(m *testing.M) { redistest.Main(m, redistest.MainOptions{LeakCheck: true}) }

// Debts above 2^53 that a float64 cannot tell apart: the overview must
// order them exactly.
const (
	bigDebt     = int64(1)<<53 + 1
	biggestDebt = int64(1)<<53 + 3
)

// seed writes three tenants (ov-a ACTIVE in observe mode, ov-b SUSPENDED,
// ov-c CLOSED), six budgets and five events in the window plus one before it.
func seed(t *testing.T, c redis.UniversalClient) {
	t.Helper()
	ledgertest.SeedTenant(t, c, "ov-a", ledgertest.Tenant{Extra: map[string]string{"observe_mode": "OBSERVE"}})
	ledgertest.SeedTenant(t, c, "ov-b", ledgertest.Tenant{Status: "SUSPENDED"})
	ledgertest.SeedTenant(t, c, "ov-c", ledgertest.Tenant{Status: "CLOSED"})
	for _, b := range []struct {
		tenant string
		b      ledgertest.Budget
	}{
		{"ov-a", ledgertest.Budget{Scope: "tenant:ov-a", Unit: "TOKENS", Allocated: 100}},
		{"ov-a", ledgertest.Budget{Scope: "tenant:ov-a/app:x", Unit: "USD_MICROCENTS", Allocated: 50, Debt: 5, OverdraftLimit: 10, Status: "FROZEN"}},
		{"ov-a", ledgertest.Budget{Scope: "tenant:ov-a/app:y", Unit: "CREDITS", Allocated: 7, Debt: bigDebt, IsOverLimit: true}},
		{"ov-b", ledgertest.Budget{Scope: "tenant:ov-b", Unit: "TOKENS", Allocated: 9, Debt: biggestDebt, IsOverLimit: true}},
		{"ov-b", ledgertest.Budget{Scope: "tenant:ov-b/app:z", Unit: "TOKENS", Allocated: 1, Status: "CLOSED"}},
		{"ov-c", ledgertest.Budget{Scope: "tenant:ov-c", Unit: "TOKENS", Allocated: 1}},
	} {
		ledgertest.SeedBudget(t, c, b.tenant, b.b)
	}
	ctx := context.Background()
	// Each event in the window gets its own millisecond, its stream id and
	// its ts the same (as the ledger writes them): the overview orders by
	// stream id, and two tenants' events in one millisecond have no order
	// the test could assert.
	base := c.Time(ctx).Val().UnixMilli() - 1000
	add := func(tenant, id, typ, cat, data string) {
		t.Helper()
		ts := strings.TrimSuffix(id, "-0")
		if id == "*" {
			base++
			ts = strconv.FormatInt(base, 10)
			id = ts + "-0"
		}
		err := c.XAdd(ctx, &redis.XAddArgs{Stream: keys.Tenant(tenant).Events(), ID: id, Values: []string{
			"id", "evt_" + tenant + "_" + strconv.FormatInt(time.Now().UnixNano(), 16)[:16], "type", typ, "cat", cat,
			"ts", ts, "scope", "tenant:" + tenant, "actor", "system", "key_id", "",
			"req", "", "trace", "", "src", "cyclesd", "data", data}}).Err()
		if err != nil {
			t.Fatal(err)
		}
	}
	old := strconv.FormatInt(time.Now().Add(-2*time.Hour).UnixMilli(), 10) + "-0"
	add("ov-a", old, "reservation.denied", "reservation", `{"reason_code":"OLD"}`)
	add("ov-a", "*", "reservation.denied", "reservation", `{"reason_code":"BUDGET_EXCEEDED","requested_amount":"5"}`)
	add("ov-a", "*", "budget.funded", "budget", `{}`)
	add("ov-b", "*", "reservation.denied", "reservation", `{"reason_code":"ACTION_QUOTA_EXCEEDED"}`)
	add("ov-b", "*", "reservation.expired", "reservation", `{}`)
	add("ov-b", "*", "reservation.denied", "reservation", `{"reason_code":"BUDGET_EXCEEDED"}`)
}

// want is what one snapshot must count.
type want struct {
	tenants, active, suspended, closed, observe int64
	budgets, frozen, over, debt                 int64
	events, denials, expiries                   int64
	capped                                      bool
}

func TestOverview(t *testing.T) {
	legs := []struct {
		name string
		c    func(t *testing.T) redis.UniversalClient
	}{
		{"single", func(t *testing.T) redis.UniversalClient { return redistest.Start(t).Client(t) }},
		{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.StartCluster(t, 3).Client(t) }},
	}
	cases := []struct {
		name string
		opts overview.Options
		want want
	}{
		{"everything", overview.Options{}, want{3, 1, 1, 1, 1, 6, 1, 2, 3, 5, 3, 1, false}},
		// ov-c is not read.
		{"tenants capped", overview.Options{MaxTenants: 2}, want{2, 1, 1, 0, 1, 5, 1, 2, 3, 5, 3, 1, true}},
		// ov-a's three, then ov-b's first in index order (the closed one).
		{"budgets capped", overview.Options{MaxBudgets: 4}, want{3, 1, 1, 1, 1, 4, 1, 1, 2, 5, 3, 1, true}},
		// ov-a's two, then ov-b's newest (a denial).
		{"events capped", overview.Options{MaxEvents: 3}, want{3, 1, 1, 1, 1, 6, 1, 2, 3, 3, 2, 0, true}},
	}
	for _, leg := range legs {
		t.Run(leg.name, func(t *testing.T) {
			c := leg.c(t)
			seed(t, c)
			ex := scripttest.On(t, c)
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					before := time.Now().UnixMilli()
					o, err := overview.New(ex, tc.opts).Get(context.Background())
					if err != nil {
						t.Fatal(err)
					}
					tn, bc, ec, cv := o.GetTenantCounts(), o.GetBudgetCounts(), o.GetEventCounts(), o.GetCoverage()
					var denials int64
					for _, n := range o.GetRecentDenialsByReason() {
						denials += n
					}
					got := want{tn.GetTotal(), tn.GetActive(), tn.GetSuspended(), tn.GetClosed(), tn.GetInObserveMode(),
						bc.GetTotal(), bc.GetFrozen(), bc.GetOverLimit(), bc.GetWithDebt(), ec.GetTotalRecent(), denials, int64(len(o.GetRecentExpiries())), cv.GetCapped()}
					if got != tc.want {
						t.Errorf("counts %+v, want %+v", got, tc.want)
					}
					if cv.GetTenantsRegistered() != 3 || cv.GetTenantsRead() != tc.want.tenants || cv.GetBudgetsRead() != tc.want.budgets ||
						cv.GetEventsRead() != tc.want.events {
						t.Errorf("coverage %v", cv)
					}
					if o.GetEventWindowSeconds() != 3600 || o.GetAsOfMs() < before-60_000 {
						t.Errorf("window %d, as of %d", o.GetEventWindowSeconds(), o.GetAsOfMs())
					}
					if int64(len(o.GetRecentDenials())) != denials {
						t.Errorf("recent: %d denials, want %d", len(o.GetRecentDenials()), denials)
					}
					for i, ev := range o.GetRecentDenials() {
						if ev.GetEventType() != "reservation.denied" || ev.GetTenantId() == "" ||
							(i > 0 && ev.GetTimestampMs() > o.GetRecentDenials()[i-1].GetTimestampMs()) {
							t.Errorf("denial %d: %v", i, ev)
						}
						if ev.GetData().GetFields()["reason_code"].GetStringValue() == "OLD" {
							t.Errorf("an event before the window: %v", ev)
						}
					}
					// Largest debt first, exactly (a float64 would tie them).
					ol := o.GetOverLimitScopes()
					if tc.want.over == 2 && (len(ol) != 2 || ol[0].GetDebt() != biggestDebt || ol[0].GetScope() != "tenant:ov-b" ||
						ol[1].GetDebt() != bigDebt || ol[1].GetUnit() != cyclesv1.Unit_UNIT_CREDITS || ol[1].GetAllocated() != 7) {
						t.Errorf("over-limit scopes %v", ol)
					}
					ds := o.GetDebtScopes()
					if int64(len(ds)) != tc.want.debt || ds[len(ds)-1].GetDebt() != 5 || ds[len(ds)-1].GetOverdraftLimit() != 10 {
						t.Errorf("debt scopes %v", ds)
					}
				})
			}
		})
	}
}
