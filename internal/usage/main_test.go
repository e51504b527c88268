package usage

import (
	"testing"

	"github.com/cyclesgo/cycles-go/test/pgtest"
	"github.com/cyclesgo/cycles-go/test/redistest"
)

// TestMain proves the tests leave nothing behind: no temp dir, no
// redis-server, no postgres, no goroutine.
func TestMain(m *testing.M) {
	redistest.Main(m, redistest.MainOptions{
		LeakCheck: true,
		Setup:     func() (func(), error) { return pgtest.StopShared, nil },
	})
}
