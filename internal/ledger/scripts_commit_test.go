package ledger_test

import (
	"testing"

	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
)

// L is an expected budget state after a commit.
type L struct {
	rem, res, spent, debt int64
	over                  bool
}

func (s *sx) wantL(rest string, want L) {
	s.t.Helper()
	got := s.st(rest)
	if got.Remaining.Int64() != want.rem || got.Reserved.Int64() != want.res || got.Spent.Int64() != want.spent ||
		got.Debt.Int64() != want.debt || got.IsOverLimit != want.over {
		s.t.Fatalf("%s: got %s, want %+v", s.path(rest), got, want)
	}
}

// Commit below / equal / above the estimate under every policy, exactly as
// docs/protocol.md#commit (charged, released, debt and is_over_limit per scope).
func TestScriptCommitPolicies(t *testing.T) {
	const E = 100
	type scopeSeed struct{ alloc, spent, lim int64 }
	cases := []struct {
		name       string
		top, ws    scopeSeed // ws.alloc 0 = no workspace budget
		est        int64
		policy     string
		actual     int64
		code       apierr.Code
		charged    string
		released   string // "" = absent
		debt       string
		wantTop    L
		wantWs     L
		wantEvents []string
	}{
		{name: "below estimate releases the rest", top: scopeSeed{alloc: 1000}, ws: scopeSeed{alloc: 500}, policy: "REJECT", actual: 60,
			charged: "60", released: "40", debt: "0", wantTop: L{rem: 940, spent: 60}, wantWs: L{rem: 440, spent: 60}},
		{name: "equal to estimate", top: scopeSeed{alloc: 1000}, ws: scopeSeed{alloc: 500}, policy: "ALLOW_IF_AVAILABLE", actual: 100,
			charged: "100", debt: "0", wantTop: L{rem: 900, spent: 100}, wantWs: L{rem: 400, spent: 100}},
		{name: "zero actual releases everything", top: scopeSeed{alloc: 1000}, policy: "ALLOW_WITH_OVERDRAFT", actual: 0,
			charged: "0", released: "100", debt: "0", wantTop: L{rem: 1000}},
		{name: "above estimate under REJECT is refused whatever is left", top: scopeSeed{alloc: 1000}, ws: scopeSeed{alloc: 500}, policy: "REJECT", actual: 101,
			code: apierr.BudgetExceeded, wantTop: L{rem: 900, res: 100}, wantWs: L{rem: 400, res: 100}},
		{name: "ALLOW_IF_AVAILABLE with room charges the actual", top: scopeSeed{alloc: 1000}, ws: scopeSeed{alloc: 500}, policy: "ALLOW_IF_AVAILABLE", actual: 150,
			charged: "150", debt: "0", wantTop: L{rem: 850, spent: 150}, wantWs: L{rem: 350, spent: 150},
			wantEvents: []string{"reservation.commit_overage"}},
		{name: "ALLOW_IF_AVAILABLE caps at the tightest scope and flags it", top: scopeSeed{alloc: 1000}, ws: scopeSeed{alloc: 120}, policy: "ALLOW_IF_AVAILABLE", actual: 150,
			charged: "120", debt: "0", wantTop: L{rem: 880, spent: 120}, wantWs: L{rem: 0, spent: 120, over: true},
			wantEvents: []string{"reservation.commit_overage", "budget.exhausted", "budget.over_limit_entered"}},
		{name: "ALLOW_WITH_OVERDRAFT worked example", top: scopeSeed{alloc: 1_000_000, spent: 950_000, lim: 100_000}, est: 1000, policy: "ALLOW_WITH_OVERDRAFT", actual: 100_000,
			charged: "100000", debt: "50000", wantTop: L{rem: -50_000, spent: 1_000_000, debt: 50_000},
			wantEvents: []string{"reservation.commit_overage", "budget.debt_incurred"}},
		{name: "ALLOW_WITH_OVERDRAFT counts only the unfunded shortfall", top: scopeSeed{alloc: 1_000_000, spent: 950_000, lim: 100_000}, est: 1000, policy: "ALLOW_WITH_OVERDRAFT", actual: 121_000,
			charged: "121000", debt: "71000", wantTop: L{rem: -71_000, spent: 1_000_000, debt: 71_000},
			wantEvents: []string{"reservation.commit_overage", "budget.debt_incurred"}},
		{name: "ALLOW_WITH_OVERDRAFT refuses debt above the limit", top: scopeSeed{alloc: 1_000_000, spent: 950_000, lim: 40_000}, est: 1000, policy: "ALLOW_WITH_OVERDRAFT", actual: 100_000,
			code: apierr.OverdraftLimitExceeded, wantTop: L{rem: 49_000, res: 1000, spent: 950_000}},
		{name: "ALLOW_WITH_OVERDRAFT: limited scope takes debt, unlimited scope with room is charged", top: scopeSeed{alloc: 1000}, ws: scopeSeed{alloc: 120, lim: 1000}, policy: "ALLOW_WITH_OVERDRAFT", actual: 150,
			charged: "150", debt: "30", wantTop: L{rem: 850, spent: 150}, wantWs: L{rem: -30, spent: 120, debt: 30},
			wantEvents: []string{"reservation.commit_overage", "budget.debt_incurred"}},
		{name: "ALLOW_WITH_OVERDRAFT: a zero-limit scope caps the charge and is flagged", top: scopeSeed{alloc: 120}, ws: scopeSeed{alloc: 1000, lim: 1000}, policy: "ALLOW_WITH_OVERDRAFT", actual: 150,
			charged: "120", debt: "0", wantTop: L{rem: 0, spent: 120, over: true}, wantWs: L{rem: 880, spent: 120},
			wantEvents: []string{"reservation.commit_overage", "budget.exhausted", "budget.over_limit_entered"}},
		{name: "ALLOW_WITH_OVERDRAFT: debt exactly at the limit is accepted", top: scopeSeed{alloc: 100, lim: 50}, policy: "ALLOW_WITH_OVERDRAFT", actual: 150,
			charged: "150", debt: "50", wantTop: L{rem: -50, spent: 100, debt: 50},
			wantEvents: []string{"reservation.commit_overage", "budget.debt_incurred"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			eachBackend(t, func(t *testing.T, s *sx) {
				s.budget(ledgertest.Budget{Scope: "", Allocated: tc.top.alloc, Spent: tc.top.spent, OverdraftLimit: tc.top.lim})
				scopes := []string{"", "workspace:prod"}
				if tc.ws.alloc != 0 {
					s.budget(ledgertest.Budget{Scope: "workspace:prod", Allocated: tc.ws.alloc, Spent: tc.ws.spent, OverdraftLimit: tc.ws.lim})
				}
				est := tc.est
				if est == 0 {
					est = E
				}
				rid := s.mustReserve(rc{Est: itoa(est), Policy: tc.policy, Scopes: scopes})
				nEvents := len(s.events())
				before := s.dump()
				o, err := s.commit(rid, "", itoa(tc.actual), "c1")
				if tc.code != "" {
					wantCode(t, err, tc.code)
					if s.dump() != before {
						t.Fatal("a refused commit wrote something")
					}
					if s.record(rid)["state"] != "ACTIVE" {
						t.Fatal("a refused commit must leave the reservation ACTIVE")
					}
				} else {
					if err != nil {
						t.Fatalf("commit: %v", err)
					}
					if o.Snap["charged"] != tc.charged || o.Snap["debt_incurred"] != tc.debt {
						t.Fatalf("charged %v debt %v, want %s %s", o.Snap["charged"], o.Snap["debt_incurred"], tc.charged, tc.debt)
					}
					rel, has := o.Snap["released"]
					if (tc.released == "") == has || (has && rel != tc.released) {
						t.Fatalf("released = %v (present %v), want %q", rel, has, tc.released)
					}
					rec := s.record(rid)
					if _, ok := rec["debt_incurred"]; !ok {
						rec["debt_incurred"] = "0" // stored only when not zero
					}
					if rec["state"] != "COMMITTED" || rec["charged"] != tc.charged || rec["debt_incurred"] != tc.debt {
						t.Fatalf("record = %v", rec)
					}
					if ev := s.events()[nEvents:]; !sameSet(ev, tc.wantEvents) {
						t.Fatalf("events = %v, want %v", ev, tc.wantEvents)
					}
				}
				s.wantL("", tc.wantTop)
				if tc.ws.alloc != 0 {
					s.wantL("workspace:prod", tc.wantWs)
				}
			})
		})
	}
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	m := map[string]int{}
	for _, x := range a {
		m[x]++
	}
	for _, x := range b {
		m[x]--
	}
	for _, v := range m {
		if v != 0 {
			return false
		}
	}
	return true
}

// A scope driven negative by an overdraft commit caps a later
// ALLOW_IF_AVAILABLE overage at zero: charged = estimate, flagged.
func TestScriptCommitAfterNegativeRemaining(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *sx) {
		s.budget(ledgertest.Budget{Scope: "", Allocated: 300, OverdraftLimit: 1000})
		a := s.mustReserve(rc{Est: "100", Policy: "ALLOW_WITH_OVERDRAFT", Scopes: []string{""}})
		b := s.mustReserve(rc{Est: "100", Policy: "ALLOW_IF_AVAILABLE", Scopes: []string{""}})
		if _, err := s.commit(a, "", "400", "ca"); err != nil { // Δ 300 vs remaining 100: debt 200
			t.Fatal(err)
		}
		s.wantL("", L{rem: -200, res: 100, spent: 200, debt: 200})
		o, err := s.commit(b, "", "150", "cb")
		if err != nil {
			t.Fatal(err)
		}
		if o.Snap["charged"] != "100" {
			t.Fatalf("charged = %v, want the estimate only", o.Snap["charged"])
		}
		s.wantL("", L{rem: -200, spent: 300, debt: 200, over: true})
	})
}
