package app

import (
	"testing"

	"github.com/cyclesgo/cycles-go/internal/script"
)

// Every script is declared with a typed binding (script.Bind) whose KEYS
// and ARGV names, count and order are those of its Lua header: a script
// without a binding or without a machine-readable header fails, as does a
// binding that disagrees with its header, or a JSON reply declared on one
// side only or differently (script.Returns and "-- JSON").
func TestEveryScriptIsBoundToItsHeader(t *testing.T) {
	for _, name := range scriptNames(t) {
		d, ok := script.Lookup(name)
		if !ok {
			continue // TestEveryScriptHasOneDef
		}
		if err := d.CheckHeader(); err != nil {
			t.Error(err)
		}
		if err := d.CheckReply(); err != nil {
			t.Error(err)
		}
	}
}
