package ledger

import (
	"strings"
	"testing"

	"github.com/cyclesgo/cycles-go/test/errtest"
)

// The flat reply reader takes well-formed replies field by field and turns
// anything malformed (short, long, a bad amount, a bad balance row) into an
// error, never a panic or a half-read response.
func TestFlatReplyReader(t *testing.T) {
	head := []any{"OK", "f1", "", ""}
	reserve := func(fields ...any) []any { return append(append([]any{}, head...), fields...) }
	ok := reserve(int64(0), "60000", "", "0", "ALLOW", "", "r1", "100", "TOKENS", "1700000000000",
		"tenant:t/workspace:w", "5000", "REJECT", "", int64(0),
		int64(2), "tenant:t", "tenant:t/workspace:w", "1,900,100,0,1000,0,0,0;2,-5,100,0,95,7,10,1")
	cases := []struct {
		name  string
		reply []any
		err   string
	}{
		{"well formed", ok, ""},
		{"short", ok[:len(ok)-1], "ends early"},
		{"trailing", append(append([]any{}, ok...), "", "", "x"), "trailing"},
		{"bad amount", reserve(int64(0), "60000", "", "0", "ALLOW", "", "r1", "1e3"), "amount"},
		{"bad row", append(append([]any{}, ok[:len(ok)-1]...), "3,1,1,1,1,1,1,0"), "malformed balance row"},
		{"short row", append(append([]any{}, ok[:len(ok)-1]...), "1,1,1"), "malformed balance row"},
		{"list too long", append(append([]any{}, ok[:len(ok)-4]...), int64(99)), "does not fit"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := replyReserve.Read(tc.reply)
			if errtest.Want(t, err, tc.err) {
				return
			}
			if s.Replay || s.RemTTL == nil || *s.RemTTL != 60000 || s.Reserved == nil || *s.Reserved != 100 ||
				s.ExpiresAtMs != 1700000000000 || s.GraceMs != 5000 || s.Policy != "REJECT" || s.Caps != "" {
				t.Fatalf("reply %+v", s)
			}
			// No affected scopes listed: the scope path's prefixes.
			if strings.Join(s.affected(), " ") != "tenant:t tenant:t/workspace:w" {
				t.Fatalf("affected %q", s.affected())
			}
			want := []balanceRow{
				{ScopePath: "tenant:t", Remaining: 900, Reserved: 100, Allocated: 1000},
				{ScopePath: "tenant:t/workspace:w", Remaining: -5, Reserved: 100, Allocated: 95, Debt: 7, OverdraftLimit: 10, IsOverLimit: true},
			}
			if len(s.Balances) != 2 || s.Balances[0] != want[0] || s.Balances[1] != want[1] {
				t.Fatalf("balances %+v", s.Balances)
			}
		})
	}
}
