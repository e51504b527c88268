package bulk

import (
	"testing"

	"github.com/cyclesgo/cycles-go/test/redistest"
)

// TestMain proves the tests leave nothing behind (temp dir, goroutines).
func TestMain(m *testing.M) {
	redistest.Main(m, redistest.MainOptions{LeakCheck: true})
}
