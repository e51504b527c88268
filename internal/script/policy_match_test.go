package script

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/cyclesgo/cycles-go/test/redistest"
)

// policyMatchProbe runs lua/lib/policy.lua's plain scope tests
// (POLICY_MEMO.plain, POLICY_MEMO.hit, and policy_terms' inline copy of
// them) and the Lua pattern itself on pairs ARGV[2i-1] (pattern), ARGV[2i]
// (scope path): per pair '<kind><hit><pattern find><terms>' with the
// results as 0/1.
const policyMatchProbe = `-- include: lib/policy.lua
local out = {}
for i = 1, #ARGV, 2 do
  local l = {ARGV[i], '', 1, 1}
  POLICY_MEMO.plain(l)
  local hit = POLICY_MEMO.hit(l, ARGV[i + 1])
  local found = string.find(ARGV[i + 1], ARGV[i]) ~= nil
  -- A one-line match table with a term, through policy_terms.
  local terms, err = policy_terms('P2\n' .. ARGV[i] .. '\te5\n', ARGV[i + 1], 0)
  if err then return ok({err = err}) end
  out[#out + 1] = l[5] .. (hit and '1' or '0') .. (found and '1' or '0') .. (terms and '1' or '0')
end
return ok({res = table.concat(out, ',')})
`

// The plain tests policy_terms runs instead of trying a scope pattern at
// every position of the scope path answer what the Lua pattern answers, for
// every shape internal/policy Compile produces (the patterns are its
// outputs: pattern_test.go's TestCompile).
func TestPolicyPlainMatchAgreesWithPattern(t *testing.T) {
	const acme = "tenant:acme"
	cases := []struct {
		lua, path, kind string
		want            bool
	}{
		{".", acme, "a", true},
		{".", acme + "/workspace:w/agent:x", "a", true},
		{"^tenant:acme$", acme, "e", true},
		{"^tenant:acme$", acme + "/workspace:w", "e", false},
		{"^tenant:acme/.+$", acme + "/workspace:w", "p", true},
		{"^tenant:acme/.+$", acme, "p", false},
		{"^tenant:acme/workspace:eng/.+$", acme + "/workspace:eng/agent:a", "p", true},
		{"^tenant:acme/workspace:eng/.+$", acme + "/workspace:eng", "p", false},
		{"^tenant:acme/workspace:eng/.+$", acme + "/workspace:engx/agent:a", "p", false},
		{"^tenant:acme/workspace:eng/.+$", acme + "/app:x/workspace:eng/agent:a", "p", false},
		{"/agent:summarizer$", acme + "/workspace:w/agent:summarizer", "s", true},
		{"/agent:summarizer$", acme + "/workspace:w/agent:xsummarizer", "s", false},
		{"/agent:summarizer$", acme + "/workspace:w/agent:summarizer/toolset:t", "s", false},
		{"/agent:summarizer$", acme + "/workspace:agent:summarizer", "s", false},
		{"/workspace:a%.b%-c/agent:x$", acme + "/workspace:a.b-c/agent:x", "s", true},
		{"/workspace:a%.b%-c/agent:x$", acme + "/workspace:aXb-c/agent:x", "s", false},
		{"/workspace:bench/.+$", acme + "/workspace:bench/agent:s1", "c", true},
		{"/workspace:bench/.+$", acme + "/workspace:bench", "c", false},
		{"/workspace:bench/.+$", acme + "/workspace:benchx/agent:s1", "c", false},
		{"/agent:[^/]+$", acme + "/workspace:w/agent:x", "w", true},
		{"/agent:[^/]+$", acme + "/agent:x/toolset:t", "w", false},
		{"/agent:[^/]+$", acme + "/workspace:agent", "w", false},
		{"/workspace:bench/agent:[^/]+$", acme + "/workspace:bench/agent:s9", "w", true},
		{"/workspace:bench/agent:[^/]+$", acme + "/workspace:other/agent:s9", "w", false},
		{"/workspace:bench/agent:[^/]+/.+$", acme + "/workspace:bench/agent:s9/toolset:t", "w", true},
		{"/workspace:bench/agent:[^/]+/.+$", acme + "/workspace:bench/agent:s9", "w", false},
		{"^tenant:[^/]+/agent:[^/]+$", acme + "/agent:x", "l", true},
		{"^tenant:[^/]+/agent:[^/]+$", acme + "/workspace:w/agent:x", "l", false},
	}
	for _, be := range redistest.AllModes(t) {
		t.Run(be.Name, func(t *testing.T) {
			ex := probeExec(t, be.Client, map[string]string{"test/policy_match": policyMatchProbe}, modeOf(be)...)
			args := make([]any, 0, 2*len(cases))
			for _, c := range cases {
				args = append(args, c.lua, c.path)
			}
			var out struct{ Res, Err string }
			if err := ex.RunInto(context.Background(), &out, def("test/policy_match"), []string{"{t:acme}"}, args...); err != nil {
				t.Fatal(err)
			}
			if out.Err != "" {
				t.Fatal(out.Err)
			}
			got := strings.Split(out.Res, ",")
			if len(got) != len(cases) {
				t.Fatalf("%d answers for %d cases: %q", len(got), len(cases), out.Res)
			}
			for i, c := range cases {
				w := "0"
				if c.want {
					w = "1"
				}
				if want := fmt.Sprintf("%s%s%s%s", c.kind, w, w, w); got[i] != want {
					t.Errorf("%s on %s: kind, plain, pattern, terms = %q, want %q", c.lua, c.path, got[i], want)
				}
			}
		})
	}
}
