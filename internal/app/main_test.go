package app

import (
	"testing"

	"github.com/cyclesgo/cycles-go/test/pgtest"
	"github.com/cyclesgo/cycles-go/test/redistest"
)

// TestMain gives the tests a private TMPDIR and stops the PostgreSQL the
// archive tests start.
func TestMain(m *testing.M) {
	redistest.Main(m, redistest.MainOptions{Setup: func() (func(), error) { return pgtest.StopShared, nil }})
}
