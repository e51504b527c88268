package script

import (
	"context"
	"strconv"
	"testing"

	"github.com/cyclesgo/cycles-go/internal/keys"

	"github.com/cyclesgo/cycles-go/test/redistest"
)

// refundProbe runs lua/lib/refund.lua on one budget key: read, step (guard
// from ARGV[2]) and, when both pass, apply.
const refundProbe = `-- include: lib/refund.lua
local b, problem = refund_read(KEYS[1])
if b == nil then return ok({problem = problem}) end
local done
done, problem = refund_step(b, ARGV[1], ARGV[2] == 'guard')
if not done then return ok({problem = problem}) end
refund_apply({b})
return ok({problem = ''})
`

// bal is a budget hash holding a packed balance with remaining rem and
// reserved res (verbatim) and fixed other parts.
func bal(rem, res string) map[string]string {
	return map[string]string{keys.BalanceField: "FROZEN:" + rem + ":" + res + ":7:100:3:9:1"}
}

// The shared hold refund (release, expiry, quarantine resolution): every
// kind of broken budget is named, not written; the underflow guard is the
// caller's choice; overflow is refused; a good refund moves both fields.
func TestRefundLibrary(t *testing.T) {
	const max = "9223372036854775807"
	cases := []struct {
		name           string
		fields         map[string]string // budget hash before (nil = no key)
		plain          string            // a string key instead of a hash
		amount, guard  string
		problem        string
		wantRes, wantR string
	}{
		{name: "ok", fields: bal("0", "10"), amount: "4", guard: "guard", wantRes: "6", wantR: "4"},
		{name: "missing", amount: "4", problem: "MISSING"},
		{name: "wrong type", plain: "x", amount: "4", problem: "WRONG_TYPE"},
		{name: "no balance", fields: map[string]string{"spent": "1"}, amount: "4", problem: "MALFORMED"},
		{name: "malformed", fields: bal("0", "x"), amount: "4", problem: "MALFORMED"},
		{name: "not canonical", fields: bal("0", "010"), amount: "4", problem: "MALFORMED"},
		{name: "underflow guarded", fields: bal("10", "5"), amount: "7", guard: "guard", problem: "RESERVED_UNDERFLOW", wantRes: "5", wantR: "10"},
		{name: "underflow allowed", fields: bal("10", "5"), amount: "7", wantRes: "-2", wantR: "17"},
		{name: "overflow", fields: bal(max, "5"), amount: "1", problem: "AMOUNT_OVERFLOW", wantRes: "5", wantR: max},
	}
	for _, be := range redistest.AllModes(t) {
		t.Run(be.Name, func(t *testing.T) {
			ex := probeExec(t, be.Client, map[string]string{"test/refund": refundProbe}, modeOf(be)...)
			ctx := context.Background()
			for _, c := range cases {
				key := "cy:{t:refund-" + be.Name + "}:b:tenant:x:" + c.name
				if c.fields != nil {
					if err := be.Client.HSet(ctx, key, c.fields).Err(); err != nil {
						t.Fatal(err)
					}
				}
				if c.plain != "" {
					be.Client.Set(ctx, key, c.plain, 0)
				}
				var out struct{ Problem string }
				if err := ex.RunInto(ctx, &out, def("test/refund"), []string{key}, c.amount, c.guard); err != nil {
					t.Fatalf("%s: %v", c.name, err)
				}
				if out.Problem != c.problem {
					t.Errorf("%s: problem %q, want %q", c.name, out.Problem, c.problem)
				}
				if c.wantRes != "" {
					got, _ := be.Client.HGet(ctx, key, keys.BalanceField).Result()
					b, err := keys.ParseBalance(got)
					if err != nil || strconv.FormatInt(b.Reserved, 10) != c.wantRes || strconv.FormatInt(b.Remaining, 10) != c.wantR {
						t.Errorf("%s: balance %q (%v), want reserved %s, remaining %s", c.name, got, err, c.wantRes, c.wantR)
					}
					// Only the two amounts change; the rest is kept as stored.
					if b.Status != "FROZEN" || b.Spent != 7 || b.Allocated != 100 || b.Debt != 3 || b.OverdraftLimit != 9 || !b.OverLimit {
						t.Errorf("%s: balance %q lost its other parts", c.name, got)
					}
				}
			}
		})
	}
}
