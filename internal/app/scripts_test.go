package app

import (
	"testing"

	"github.com/cyclesgo/cycles-go/internal/script"
)

// scriptNames are the names of every script the executor compiles from
// the embedded Lua tree.
func scriptNames(t *testing.T) []string {
	t.Helper()
	ex, err := script.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return ex.Names()
}

// cyclesd links every domain package, so every embedded script must have
// exactly one Def among them (script.Define panics on a Def without a
// script or a second Def), and only small, bounded per-request scripts may
// share a pipeline.
func TestEveryScriptHasOneDef(t *testing.T) {
	names := scriptNames(t)
	defined := map[string]bool{}
	for _, d := range script.Defs() {
		defined[d.Name()] = true
	}
	for _, name := range names {
		if !defined[name] {
			t.Errorf("lua/%s.lua has no script.Define", name)
		}
	}
	if len(defined) != len(names) {
		t.Errorf("%d Defs for %d scripts", len(defined), len(names))
	}
	for _, name := range []string{"sweeper/expire_batch", "ledger/list", "ledger/release_for_close", "events/read", "admin/fund_budget"} {
		if d, ok := script.Lookup(name); !ok || d.IsPipelined() {
			t.Errorf("%s must be defined and not pipelined", name)
		}
	}
	for _, name := range []string{"ledger/reserve", "ledger/commit", "ledger/release", "admin/verify_api_key", "ratelimit/sliding_window"} {
		if d, ok := script.Lookup(name); !ok || !d.IsPipelined() {
			t.Errorf("%s must be defined and pipelined", name)
		}
	}
}
