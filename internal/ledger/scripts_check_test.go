package ledger_test

import (
	"strings"
	"testing"

	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
)

// Scopes, UNIT_MISMATCH and NOT_FOUND (docs/protocol.md#scopes-and-budgets, docs/protocol.md#reserve, docs/protocol.md#direct-debits-createevent).
func TestScriptScopesUnitMismatchNotFound(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *sx) {
		// No budget in any unit: live reserve and event are NOT_FOUND naming
		// the deepest scope; dry run and decide answer DENY BUDGET_NOT_FOUND.
		before := s.dump()
		_, err := s.reserve(rc{Est: "10"})
		ae := wantCode(t, err, apierr.NotFound)
		if ae.Details["scope"] != s.path("workspace:prod") || !strings.Contains(ae.Message, "Budget not found for provided scope: "+s.path("workspace:prod")) {
			t.Fatalf("NOT_FOUND = %+v", ae)
		}
		_, err = s.event(ec{Actual: "10"})
		wantCode(t, err, apierr.NotFound)
		if after := s.dump(); after != before {
			t.Fatalf("refusals wrote:\n%s\nvs\n%s", before, after)
		}
		o, err := s.reserve(rc{Mode: "dry", Est: "10"})
		if err != nil || o.Snap["decision"] != "DENY" || o.Snap["reason_code"] != "BUDGET_NOT_FOUND" {
			t.Fatalf("dry run = %+v, %v", o, err)
		}
		o, err = s.decide("10", "")
		if err != nil || o.Snap["decision"] != "DENY" || o.Snap["reason_code"] != "BUDGET_NOT_FOUND" {
			t.Fatalf("decide = %+v, %v", o, err)
		}

		// Budgets only in other units: UNIT_MISMATCH with details, on every
		// evaluating path (it stays an error on dry run and decide).
		s.budget(ledgertest.Budget{Scope: "workspace:prod", Unit: "CREDITS", Allocated: 100})
		s.budget(ledgertest.Budget{Scope: "workspace:prod", Unit: "USD_MICROCENTS", Allocated: 100})
		before = s.dump()
		check := func(what string, err error) {
			t.Helper()
			ae := wantCode(t, err, apierr.UnitMismatch)
			if ae.Details["scope"] != s.path("workspace:prod") || ae.Details["requested_unit"] != "TOKENS" ||
				ae.Details["expected_units"] != "CREDITS,USD_MICROCENTS" {
				t.Fatalf("%s: details = %v", what, ae.Details)
			}
		}
		_, err = s.reserve(rc{Est: "10"})
		check("reserve", err)
		_, err = s.reserve(rc{Mode: "dry", Est: "10"})
		check("dry run", err)
		_, err = s.decide("10", "")
		check("decide", err)
		_, err = s.event(ec{Actual: "10"})
		check("event", err)
		if after := s.dump(); after != before {
			t.Fatalf("UNIT_MISMATCH wrote something")
		}

		// Partial unit coverage is not an error: the tenant level has TOKENS,
		// so the workspace (CREDITS only) is simply unbudgeted.
		s.budget(ledgertest.Budget{Scope: "", Allocated: 100})
		o, err = s.reserve(rc{Est: "10"})
		if err != nil {
			t.Fatal(err)
		}
		if n := len(o.Snap["balances"].([]any)); n != 1 {
			t.Fatalf("balances = %d, want only the budgeted tenant scope", n)
		}
		if n := len(o.Snap["affected"].([]any)); n != 2 {
			t.Fatalf("affected = %d, want both derived scopes", n)
		}
		rec := s.record(o.Snap["reservation_id"].(string))
		// Stored compactly: the position of the tenant scope in the path.
		if got, err := keys.BudgetedScopes(rec["budgeted"], rec["scope_path"]); err != nil || len(got) != 1 || got[0] != s.path("") {
			t.Fatalf("budgeted = %s (%v, %v)", rec["budgeted"], got, err)
		}
	})
}

// Check order: tenant guard, then each budgeted scope in canonical order
// (frozen, closed, over limit, debt outstanding, insufficient remaining);
// the first failure wins with exact code and details, and nothing is written.
func TestScriptCheckOrder(t *testing.T) {
	type seed struct {
		tenant ledgertest.Tenant
		top    ledgertest.Budget // tenant level
		ws     ledgertest.Budget // workspace:prod
	}
	cases := []struct {
		name      string
		seed      seed
		code      apierr.Code
		reason    string // dry-run / decide DENY reason ("" = same as code)
		scope     string // "" = tenant level, else the workspace
		remaining string
	}{
		{"tenant closed precedes budget state", seed{tenant: ledgertest.Tenant{Status: "CLOSED"}, top: ledgertest.Budget{Allocated: 1000, Status: "FROZEN"}},
			apierr.TenantClosed, "", "-", ""},
		{"tenant suspended", seed{tenant: ledgertest.Tenant{Status: "SUSPENDED"}, top: ledgertest.Budget{Allocated: 1000}},
			apierr.TenantSuspended, "", "-", ""},
		{"first scope in canonical order wins", seed{top: ledgertest.Budget{Allocated: 1000, Status: "FROZEN"}, ws: ledgertest.Budget{Allocated: 50}},
			apierr.BudgetFrozen, "", "", "1000"},
		{"insufficient at the top beats frozen below", seed{top: ledgertest.Budget{Allocated: 50}, ws: ledgertest.Budget{Allocated: 1000, Status: "FROZEN"}},
			apierr.BudgetExceeded, "", "", "50"},
		{"frozen beats over limit and debt", seed{top: ledgertest.Budget{Allocated: 1000}, ws: ledgertest.Budget{Allocated: 1000, Status: "FROZEN", IsOverLimit: true, Debt: 10}},
			apierr.BudgetFrozen, "", "ws", "990"},
		{"closed beats over limit", seed{top: ledgertest.Budget{Allocated: 1000}, ws: ledgertest.Budget{Allocated: 1000, Status: "CLOSED", IsOverLimit: true}},
			apierr.BudgetClosed, "", "ws", "1000"},
		{"over limit beats debt outstanding", seed{top: ledgertest.Budget{Allocated: 1000}, ws: ledgertest.Budget{Allocated: 1000, IsOverLimit: true, Debt: 950}},
			apierr.OverdraftLimitExceeded, "", "ws", "50"},
		{"debt outstanding without overdraft limit", seed{top: ledgertest.Budget{Allocated: 1000}, ws: ledgertest.Budget{Allocated: 1000, Debt: 950}},
			apierr.DebtOutstanding, "", "ws", "50"},
		{"debt within a positive limit does not block, remaining does", seed{top: ledgertest.Budget{Allocated: 1000}, ws: ledgertest.Budget{Allocated: 1000, Debt: 950, OverdraftLimit: 2000}},
			apierr.BudgetExceeded, "", "ws", "50"},
		{"remaining one short", seed{top: ledgertest.Budget{Allocated: 1000}, ws: ledgertest.Budget{Allocated: 99}},
			apierr.BudgetExceeded, "", "ws", "99"},
		{"remaining exactly the estimate", seed{top: ledgertest.Budget{Allocated: 1000}, ws: ledgertest.Budget{Allocated: 100}},
			"", "", "", ""},
		{"debt within a positive limit with enough remaining", seed{top: ledgertest.Budget{Allocated: 1000}, ws: ledgertest.Budget{Allocated: 1000, Debt: 10, OverdraftLimit: 20}},
			"", "", "", ""},
		{"malformed tenant record fails closed", seed{tenant: ledgertest.Tenant{Status: "PAUSED"}, top: ledgertest.Budget{Allocated: 1000}},
			apierr.InternalError, "", "-", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			eachBackend(t, func(t *testing.T, s *sx) {
				if tc.seed.tenant.Status != "" {
					ledgertest.SeedTenant(t, s.c, s.tenant, tc.seed.tenant)
				}
				if tc.seed.top.Allocated != 0 {
					s.budget(tc.seed.top)
				}
				if tc.seed.ws.Allocated != 0 {
					tc.seed.ws.Scope = "workspace:prod"
					s.budget(tc.seed.ws)
				}
				before := s.dump()
				o, err := s.reserve(rc{Est: "100"})
				if tc.code == "" {
					if err != nil {
						t.Fatalf("reserve: %v", err)
					}
					if o.Snap["decision"] != "ALLOW" {
						t.Fatalf("decision = %v", o.Snap["decision"])
					}
					return
				}
				ae := wantCode(t, err, tc.code)
				if tc.scope != "-" {
					want := s.path("")
					if tc.scope == "ws" {
						want = s.path("workspace:prod")
					}
					if ae.Details["scope"] != want || ae.Details["remaining"] != tc.remaining || ae.Details["requested"] != "100" {
						t.Fatalf("details = %v, want scope %s remaining %s requested 100", ae.Details, want, tc.remaining)
					}
				}
				if after := s.dump(); after != before {
					t.Fatalf("a refused reserve wrote:\n%s\nvs\n%s", before, after)
				}
				// Dry run and decide: the same condition is a DENY result
				// (only a malformed tenant record stays an error).
				reason := tc.reason
				if reason == "" {
					reason = string(tc.code)
				}
				do, derr := s.reserve(rc{Mode: "dry", Est: "100"})
				dd, eerr := s.decide("100", "")
				if tc.code == apierr.InternalError {
					wantCode(t, derr, apierr.InternalError)
					wantCode(t, eerr, apierr.InternalError)
					return
				}
				if derr != nil || do.Snap["decision"] != "DENY" || do.Snap["reason_code"] != reason || do.Denied != reason {
					t.Fatalf("dry run = %+v, %v; want DENY %s", do, derr, reason)
				}
				if eerr != nil || dd.Snap["decision"] != "DENY" || dd.Snap["reason_code"] != reason {
					t.Fatalf("decide = %+v, %v; want DENY %s", dd, eerr, reason)
				}
				if _, ok := do.Snap["reservation_id"]; ok {
					t.Fatal("a dry run must not carry a reservation id")
				}
			})
		})
	}
}
