package script

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/test/redistest"
)

// keysProbe runs every lua/lib/keys.lua builder on the parts in ARGV and
// names (by position) the results that differ from internal/keys' (ARGV[7..]).
const keysProbe = `-- include: lib/keys.lua
local p = ARGV[1]
local got = {key_tenant(p), key_budget(p, ARGV[2], ARGV[3]), key_reservation(p, ARGV[4]),
  key_idem(p, ARGV[5], ARGV[6]), key_event(p, ARGV[4]), key_index(p, 'deadline'),
  key_index(p, 'quarantine'), key_index(p, 'created'), key_index(p, 'expires'), key_index(p, 'budgets'), key_archive_queue(p),
  key_quota_counter(p, ARGV[2], ARGV[3], ARGV[5], ARGV[6]), key_quota_counter(p, ARGV[2], '__risk__:' .. ARGV[4], 'per_day_tumbling', ARGV[3]),
  key_quota_index(p), key_quota_day(p, ARGV[6]), key_policy_rate(p, ARGV[5])}
local bad = {}
for i = 1, #got do
  if got[i] ~= ARGV[6 + i] then bad[#bad + 1] = tostring(i) end
end
return ok({n = #got, bad = table.concat(bad, ',')})
`

// keyParts is one set of inputs of the key builders.
type keyParts struct{ tenant, scope, unit, id, endpoint, key string }

// want is what internal/keys builds from p, in keysProbe's order.
func (p keyParts) want() []string {
	t := keys.Tenant(p.tenant)
	return []string{p.tenant, t.Budget(p.scope, p.unit), t.Reservation(p.id), t.Idempotency(p.endpoint, p.key),
		t.Event(p.id), t.Deadlines(), t.Quarantine(), t.Created(), t.Expires(), t.Budgets(), t.ArchiveQueue(),
		t.QuotaCounter(p.scope, p.unit, p.endpoint, p.key), t.QuotaCounter(p.scope, "__risk__:"+p.id, "per_day_tumbling", p.unit),
		t.QuotaCounters(), t.QuotaDay(p.key), t.PolicyRate(p.endpoint)}
}

// oddString is a random string of 0..40 bytes drawn from separators, pattern
// characters, multi-byte UTF-8 and raw bytes, the inputs most likely to make
// two layouts disagree.
func oddString(r *rand.Rand) string {
	pieces := []string{":", "/", "|", "{", "}", "%", "%d", ".", "-", "_", " ", "\x00", "\xff", "ü", "€", "tenant:", "agent:",
		"a", "Z", "9", "b:", "r:", "idem:", "\n", "''", `"`, "\\"}
	var b strings.Builder
	for n := r.IntN(12); n > 0; n-- {
		b.WriteString(pieces[r.IntN(len(pieces))])
	}
	return b.String()
}

// The key layout lives twice, in internal/keys (keys Go passes in KEYS) and in
// lua/lib/keys.lua (keys a script derives from what it reads). Every Lua
// builder, run through the executor on every backend, must build exactly
// internal/keys' key for ordinary, odd and random parts, so the two cannot drift.
func TestLuaKeyLayoutMatchesPkgKeys(t *testing.T) {
	cases := []keyParts{
		{"acme", "tenant:acme/workspace:prod/agent:bot", "TOKENS", "r_acme_0123456789abcdef0123456789abcdef", "reserve", "k-1"},
		{"a", "tenant:a", "USD_MICROCENTS", "evt_00112233445566770001", "extend:r_a_00", "x.y_z"},
		{"", "", "", "", "", ""},
		{"t.1-_", "tenant:t.1-_/app:a:b:c", "a:b", "deadline", "fund", "pay:1"},
		{"{t:other}", "{x}|y", "%s", "%d", "resolve", "%%"},
		{"ü", "tenant:ü/€", "TOKENS", "\x00\xff", "repair", "\n"},
		{strings.Repeat("t", 128), strings.Repeat("tenant:x/", 100), "CREDITS", strings.Repeat("9", 200), "decide", strings.Repeat("k", 256)},
	}
	r := rand.New(rand.NewPCG(16, 16))
	for i := 0; i < 200; i++ {
		cases = append(cases, keyParts{oddString(r), oddString(r), oddString(r), oddString(r), oddString(r), oddString(r)})
	}
	for _, be := range redistest.AllModes(t) {
		t.Run(be.Name, func(t *testing.T) {
			ex := probeExec(t, be.Client, map[string]string{"test/keys": keysProbe}, modeOf(be)...)
			ctx := context.Background()
			for _, c := range cases {
				want := c.want()
				args := []any{keys.Tenant(c.tenant).Prefix(), c.scope, c.unit, c.id, c.endpoint, c.key}
				for _, w := range want {
					args = append(args, w)
				}
				var out struct {
					N   int
					Bad string
				}
				if err := ex.RunInto(ctx, &out, def("test/keys"), []string{keys.Tenant(c.tenant).Prefix()}, args...); err != nil {
					t.Fatalf("%q: %v", c, err)
				}
				if out.N != len(want) || out.Bad != "" {
					t.Errorf("parts %q: Lua builders %s (of %d) differ from internal/keys %q", c, out.Bad, out.N, want)
				}
			}
		})
	}
}
