package script

import (
	"strconv"
	"testing"
	"time"

	"github.com/cyclesgo/cycles-go/test/redistest"
	"github.com/redis/go-redis/v9"
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

// freshTag is a key prefix under a hash tag no earlier run used (a Cluster
// pipeline then goes to one node): "cy:{t:<what>-<backend>-<nanos>}:".
func freshTag(what string, be redistest.Backend) string {
	return "cy:{t:" + what + "-" + be.Name + "-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "}:"
}

// probeExec compiles the embedded scripts plus the test scripts probes
// (name -> body) for client c, failing the test if they do not compile.
func probeExec(tb testing.TB, c redis.UniversalClient, probes map[string]string, opts ...Option) *Executor {
	tb.Helper()
	ex, err := newWith(c, probes, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return ex
}
