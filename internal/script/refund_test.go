package script

import (
	"context"
	"testing"

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
		{name: "ok", fields: map[string]string{"reserved": "10", "remaining": "0"}, amount: "4", guard: "guard", wantRes: "6", wantR: "4"},
		{name: "missing", amount: "4", problem: "MISSING"},
		{name: "wrong type", plain: "x", amount: "4", problem: "WRONG_TYPE"},
		{name: "no fields", fields: map[string]string{"spent": "1"}, amount: "4", problem: "MALFORMED"},
		{name: "malformed", fields: map[string]string{"reserved": "x", "remaining": "0"}, amount: "4", problem: "MALFORMED"},
		{name: "underflow guarded", fields: map[string]string{"reserved": "5", "remaining": "10"}, amount: "7", guard: "guard", problem: "RESERVED_UNDERFLOW", wantRes: "5", wantR: "10"},
		{name: "underflow allowed", fields: map[string]string{"reserved": "5", "remaining": "10"}, amount: "7", wantRes: "-2", wantR: "17"},
		{name: "overflow", fields: map[string]string{"reserved": "5", "remaining": max}, amount: "1", problem: "AMOUNT_OVERFLOW", wantRes: "5", wantR: max},
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
					got, _ := be.Client.HMGet(ctx, key, "reserved", "remaining").Result()
					if got[0] != c.wantRes || got[1] != c.wantR {
						t.Errorf("%s: reserved, remaining = %v, want %s, %s", c.name, got, c.wantRes, c.wantR)
					}
				}
			}
		})
	}
}
