package ledger

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/keys"
)

func TestIsPrefixChain(t *testing.T) {
	path := "tenant:a/workspace:w/agent:x"
	for _, aff := range [][]string{
		keys.ScopePrefixes(path), {"tenant:a", "tenant:a/workspace:w"}, {"tenant:a", "tenant:a/agent:x", path},
		{"tenant:a", "tenant:a/workspace:w", path, path}, {}, {""}, {"tenant:a"},
	} {
		for _, p := range []string{path, "", "tenant:a"} {
			if got, want := isPrefixChain(aff, p), slices.Equal(aff, keys.ScopePrefixes(p)); got != want {
				t.Errorf("isPrefixChain(%q, %q) = %v, want %v", aff, p, got, want)
			}
		}
	}
}

func BenchmarkDerive(b *testing.B) {
	subj := &cyclesv1.Subject{Tenant: "acme", Workspace: "prod", App: "chat", Agent: "planner"}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := derive("acme", subj, cyclesv1.Unit_UNIT_TOKENS, 0); err != nil {
			b.Fatal(err)
		}
	}
}

func TestBalancesMapsEveryAmount(t *testing.T) {
	got := balances(cyclesv1.Unit_UNIT_TOKENS, []balanceRow{
		{ScopePath: "tenant:a", Remaining: -1, Reserved: 2, Spent: 3, Allocated: 4, Debt: 5, OverdraftLimit: 6, IsOverLimit: true},
		{ScopePath: "tenant:a/app:x", Unit: "CREDITS", Remaining: 7, Reserved: 8, Spent: 9, Allocated: 10, Debt: 11, OverdraftLimit: 12},
	})
	amt := func(u cyclesv1.Unit, v int64) *cyclesv1.Amount { return &cyclesv1.Amount{Unit: u, Amount: v} }
	tok, cr := cyclesv1.Unit_UNIT_TOKENS, cyclesv1.Unit_UNIT_CREDITS
	want := []*cyclesv1.Balance{
		{Scope: "tenant:a", ScopePath: "tenant:a", Remaining: &cyclesv1.SignedAmount{Unit: tok, Amount: -1},
			Reserved: amt(tok, 2), Spent: amt(tok, 3), Allocated: amt(tok, 4), Debt: amt(tok, 5), OverdraftLimit: amt(tok, 6), IsOverLimit: true},
		{Scope: "app:x", ScopePath: "tenant:a/app:x", Remaining: &cyclesv1.SignedAmount{Unit: cr, Amount: 7},
			Reserved: amt(cr, 8), Spent: amt(cr, 9), Allocated: amt(cr, 10), Debt: amt(cr, 11), OverdraftLimit: amt(cr, 12)},
	}
	if len(got) != len(want) {
		t.Fatalf("%d rows, want %d", len(got), len(want))
	}
	for i := range want {
		if !proto.Equal(got[i], want[i]) {
			t.Errorf("row %d:\n got %v\nwant %v", i, got[i], want[i])
		}
	}
}

// BenchmarkBalances converts the four balance rows of a typical reserve reply.
func BenchmarkBalances(b *testing.B) {
	rows := make([]balanceRow, 4)
	for i, p := range keys.ScopePrefixes("tenant:acme/workspace:prod/app:chat/agent:planner") {
		rows[i] = balanceRow{ScopePath: p, Remaining: 900, Reserved: 100, Allocated: 1000, OverdraftLimit: 5}
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = balances(cyclesv1.Unit_UNIT_TOKENS, rows)
	}
}
