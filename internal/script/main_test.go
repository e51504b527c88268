package script

import (
	"testing"

	"github.com/cyclesgo/cycles-go/test/redistest"
)

// TestMain proves the tests leave nothing behind: no temp dir, no
// redis-server, no goroutine (redistest.Main).
func TestMain(m *testing.M) { redistest.Main(m, redistest.MainOptions{LeakCheck: true}) }

// def is the Def of a test script (pipelined, like the per-request scripts).
func def(name string) *Def { return &Def{name: name, pipelined: true} }

// modeOf is how production sends scripts on be: as Redis 7 Functions on the
// Functions leg (test/scripttest does the same for the other packages; it
// cannot serve this one, which it imports).
func modeOf(be redistest.Backend) []Option {
	if be.Functions {
		return []Option{WithFunctions()}
	}
	return nil
}
