package ledger_test

import (
	"testing"

	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
)

const (
	max64   = ledgertest.MaxInt64 // 2^63-1
	p53plus = "9007199254740993"  // 2^53+1: the first integer a double cannot hold
)

// Exact int64 at 2^53+1 and 2^63-1 through reserve, commit and event.
func TestScriptInt64Exact(t *testing.T) {
	for _, amt := range []string{p53plus, max64} {
		t.Run(amt, func(t *testing.T) {
			eachBackend(t, func(t *testing.T, s *sx) {
				s.budget(ledgertest.Budget{Scope: "", Allocated: atoi(amt)})
				rid := s.mustReserve(rc{Est: amt, Scopes: []string{""}})
				st := s.st("")
				if st.Reserved.String() != amt || st.Remaining.String() != "0" {
					t.Fatalf("after reserve: %s", st)
				}
				// Commit one less than the estimate: exactly 1 comes back.
				minus1 := ledgertest.Int(amt)
				minus1.Sub(minus1, ledgertest.Int("1"))
				o, err := s.commit(rid, "", minus1.String(), "c")
				if err != nil {
					t.Fatal(err)
				}
				if o.Snap["charged"] != minus1.String() || o.Snap["released"] != "1" {
					t.Fatalf("commit = %v", o.Snap)
				}
				st = s.st("")
				if st.Spent.String() != minus1.String() || st.Remaining.String() != "1" || st.Reserved.String() != "0" {
					t.Fatalf("after commit: %s", st)
				}
				// Balance snapshots carry the exact strings.
				bal := o.Snap["balances"].([]any)[0].(map[string]any)
				if bal["spent"] != minus1.String() || bal["allocated"] != amt {
					t.Fatalf("snapshot balance = %v", bal)
				}
			})
		})
	}
}

// An increment that would overflow int64 is refused with AMOUNT_OVERFLOW
// before the first write; the debt aggregate saturates instead.
func TestScriptInt64Overflow(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *sx) {
		// Deliberately broken ledgers (an overflow is unreachable while the
		// invariant holds), on a separate tenant the invariant check skips.
		bad := &sx{t: t, c: s.c, ex: s.ex, tenant: ledgertest.NewTenantID(t)}
		bad.tk = keys.Tenant(bad.tenant)
		bad.budget(ledgertest.Budget{Scope: "", Allocated: 1000, Reserved: atoi(max64) - 5, RemainingOverride: "1000"})
		before := bad.dump()
		_, err := bad.reserve(rc{Est: "10", Scopes: []string{""}})
		wantCode(t, err, apierr.Overflow)
		if bad.dump() != before {
			t.Fatal("a refused overflow wrote something")
		}

		bad2 := &sx{t: t, c: s.c, ex: s.ex, tenant: ledgertest.NewTenantID(t)}
		bad2.tk = keys.Tenant(bad2.tenant)
		bad2.budget(ledgertest.Budget{Scope: "", Allocated: 1000, Spent: atoi(max64) - 5, RemainingOverride: "1000"})
		before = bad2.dump()
		_, err = bad2.event(ec{Actual: "10", Scopes: []string{""}})
		wantCode(t, err, apierr.Overflow)
		if bad2.dump() != before {
			t.Fatal("a refused event overflow wrote something")
		}
		// A multi-scope reservation where only the second scope overflows:
		// the first must not have been touched either.
		bad2.budget(ledgertest.Budget{Scope: "workspace:prod", Allocated: 1000})
		rid := bad2.mustReserve(rc{Est: "10", Scopes: []string{"workspace:prod"}})
		bad2.c.HSet(ctx, bad2.tk.Reservation(rid), "budgeted", `["`+bad2.path("workspace:prod")+`","`+bad2.path("")+`"]`)
		before = bad2.dump()
		_, err = bad2.commit(rid, "", "10", "c")
		wantCode(t, err, apierr.Overflow)
		if bad2.dump() != before {
			t.Fatal("a refused commit overflow wrote to the first scope")
		}

		// Out-of-range amounts never reach the ledger.
		_, err = s.reserve(rc{Est: "9223372036854775808"})
		wantCode(t, err, apierr.InvalidRequest)
		_, err = s.event(ec{Actual: "-1"})
		wantCode(t, err, apierr.InvalidRequest)

		// Debt aggregate saturates at 2^63-1: two scopes each take max debt.
		s.budget(ledgertest.Budget{Scope: "", Allocated: 0, OverdraftLimit: atoi(max64)})
		s.budget(ledgertest.Budget{Scope: "workspace:prod", Allocated: 0, OverdraftLimit: atoi(max64)})
		o, err := s.event(ec{Actual: max64, Policy: "ALLOW_WITH_OVERDRAFT"})
		if err != nil {
			t.Fatal(err)
		}
		if o.Snap["debt_incurred"] != max64 || o.Debt != max64 {
			t.Fatalf("debt_incurred = %v, want saturated %s", o.Snap["debt_incurred"], max64)
		}
		for _, p := range []string{"", "workspace:prod"} {
			st := s.st(p)
			if st.Debt.String() != max64 || st.Remaining.String() != "-"+max64 || st.Spent.String() != "0" {
				t.Fatalf("%s: %s", p, st)
			}
		}
	})
}
