package archiver

import (
	"testing"

	"github.com/cyclesgo/cycles-go/test/pgtest"
)

// TestMain proves the tests leave nothing behind: no temp dir, no
// redis-server, no postgres, no goroutine.
func TestMain(m *testing.M) { pgtest.Main(m) }
