package app

import (
	"testing"

	"github.com/cyclesgo/cycles-go/internal/script"
)

// notYetBound lists the scripts still called by position while the domain
// packages move to typed bindings, package by package; it only shrinks.
var notYetBound = map[string]bool{
	"ledger/balances":          true,
	"ledger/commit":            true,
	"ledger/decide":            true,
	"ledger/event":             true,
	"ledger/exists":            true,
	"ledger/extend":            true,
	"ledger/get":               true,
	"ledger/list":              true,
	"ledger/release":           true,
	"ledger/release_for_close": true,
	"ledger/reserve":           true,
}

// Every script is declared with a typed binding (script.Bind) whose KEYS
// and ARGV names, count and order are those of its Lua header: a script
// without a binding or without a machine-readable header fails, as does a
// binding that disagrees with its header.
func TestEveryScriptIsBoundToItsHeader(t *testing.T) {
	ex, err := script.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range ex.Names() {
		d, ok := script.Lookup(name)
		if !ok {
			continue // TestEveryScriptHasOneDef
		}
		if notYetBound[name] {
			if d.Bound() {
				t.Errorf("%s is bound: take it off notYetBound", name)
			}
			continue
		}
		if err := d.CheckHeader(); err != nil {
			t.Error(err)
		}
	}
}
