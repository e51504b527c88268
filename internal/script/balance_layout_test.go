package script

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/test/redistest"
)

// balanceProbe splits every stored balance in ARGV with lua/lib/core.lua
// BAL.split and packs the parts again with BAL.pack: the repacked string, or
// ” when BAL.split refused it.
const balanceProbe = `
local out = {}
for i = 1, #ARGV do
  local st, rem, res, spent, alloc, debt, lim, over = BAL.split(ARGV[i])
  out[i] = st and BAL.pack(st, rem, res, spent, alloc, debt, lim, over) or ''
end
return ok({got = out})
`

// The packed budget balance lives twice, in lua/lib/core.lua BAL (every
// ledger script) and internal/keys.Balance (the admin reads, the tests): the
// Lua reader must accept exactly what the Go one accepts, give back the same
// values (Lua's pack of Lua's split is Go's Pack of Go's parse), and refuse,
// on every backend, each non-canonical or malformed value (the scripts then
// fail closed before any write).
func TestLuaBalanceLayoutMatchesPkgKeys(t *testing.T) {
	good := []keys.Balance{
		{Status: "ACTIVE"},
		{Status: "ACTIVE", Remaining: 900, Reserved: 100, Allocated: 1000},
		{Status: "FROZEN", Remaining: -5, Reserved: 3, Spent: 7, Allocated: 5, Debt: 2, OverdraftLimit: 10, OverLimit: true},
		{Status: "CLOSED", Remaining: math.MaxInt64, Reserved: math.MinInt64, Spent: 999_999_999_999_999,
			Allocated: 1_000_000_000_000_000, Debt: -999_999_999_999_999, OverdraftLimit: math.MaxInt64 - 1},
	}
	in := []string{}
	for _, b := range good {
		in = append(in, b.Pack())
	}
	bad := []string{
		"", "ACTIVE", "ACTIVE:0:0:0:0:0:0", "ACTIVE:0:0:0:0:0:0:0:0", "PAUSED:0:0:0:0:0:0:0", "active:0:0:0:0:0:0:0",
		"ACTIVE:0:0:0:0:0:0:2", "ACTIVE:0:0:0:0:0:0:true", "ACTIVE:00:0:0:0:0:0:0", "ACTIVE:0:07:0:0:0:0:0",
		"ACTIVE:-0:0:0:0:0:0:0", "ACTIVE:0:-07:0:0:0:0:0", "ACTIVE:+1:0:0:0:0:0:0", "ACTIVE:1e3:0:0:0:0:0:0",
		"ACTIVE:0:0:0:0:0:9223372036854775808:0", "ACTIVE:-9223372036854775809:0:0:0:0:0:0",
		"ACTIVE:0:0:0:0:0:00000000000000001:0", "ACTIVE: 1:0:0:0:0:0:0", "ACTIVE:1 :0:0:0:0:0:0",
		"ACTIVE:0:0:0:0:0:0:0\n", "ACTIVE:0:0:0:0:0:0:0:", ":ACTIVE:0:0:0:0:0:0:0", "ACTIVE:0::0:0:0:0:0",
		"ACTIVE:1.5:0:0:0:0:0:0", "ACTIVE:0:0:0:0:0:0:0 ",
	}
	for _, s := range bad {
		if _, err := keys.ParseBalance(s); !errors.Is(err, keys.ErrBalance) {
			t.Errorf("keys.ParseBalance(%q) = %v, want ErrBalance", s, err)
		}
	}
	for _, b := range good {
		got, err := keys.ParseBalance(b.Pack())
		if err != nil || got != b {
			t.Errorf("keys.ParseBalance(%q) = %+v, %v; want %+v", b.Pack(), got, err, b)
		}
	}
	args := []any{}
	for _, s := range append(in, bad...) {
		args = append(args, s)
	}
	for _, be := range redistest.AllModes(t) {
		t.Run(be.Name, func(t *testing.T) {
			ex := probeExec(t, be.Client, map[string]string{"test/balance": balanceProbe}, modeOf(be)...)
			var out struct{ Got []string }
			if err := ex.RunInto(context.Background(), &out, def("test/balance"), []string{"cy:{t:bal}:b:x"}, args...); err != nil {
				t.Fatal(err)
			}
			if len(out.Got) != len(args) {
				t.Fatalf("%d results for %d balances", len(out.Got), len(args))
			}
			for i, s := range in {
				if out.Got[i] != s {
					t.Errorf("Lua split+pack of %q = %q, want it unchanged", s, out.Got[i])
				}
			}
			for i, s := range bad {
				if got := out.Got[len(in)+i]; got != "" {
					t.Errorf("Lua BAL.split accepted %q (repacked %q)", s, got)
				}
			}
		})
	}
}
