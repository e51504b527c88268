package enumkey_test

import (
	"testing"

	"github.com/cyclesgo/cycles-go/test/redistest"
)

// TestMain proves the tests leave nothing behind: no temp dir, no
// redis-server, no goroutine (redistest.Main).
func TestMain(m *testing.M) { redistest.Main(m, redistest.MainOptions{LeakCheck: true}) }
