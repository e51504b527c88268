// Package abuse attacks the real cyclesd binary, on a real redis-server, the
// way a hostile client on the network would (stalled bodies, floods from
// clients that never read, slowloris, idle connections, replays), and checks
// while each attack runs that the process stays bounded and other tenants are
// still served. harness_test.go is the shared toolkit; README.md lists the
// attacks and what stops each.
package abuse

import (
	"os"
	"testing"

	"github.com/cyclesgo/cycles-go/test/crash/cyclesdtest"
	"github.com/cyclesgo/cycles-go/test/redistest"
)

// binary is the cyclesd built once for the whole package.
var binary string

// binaryEnv names a prebuilt cyclesd to attack instead (e.g. an older build,
// to record the "before" figures of docs/limits.md).
const binaryEnv = "CYCLES_ABUSE_BINARY"

func TestMain(m *testing.M) {
	redistest.Main(m, redistest.MainOptions{LeakCheck: true, Setup: func() (func(), error) {
		if os.Getenv(attackerEnv) != "" {
			return func() {}, nil // an attacker process (attacker_test.go) needs no cyclesd
		}
		if bin := os.Getenv(binaryEnv); bin != "" {
			binary = bin
			return func() {}, nil
		}
		return cyclesdtest.BuildTemp("cyclesd-abuse-", &binary)
	}})
}
