package archive

import (
	"testing"

	"github.com/cyclesgo/cycles-go/test/pgtest"
	"github.com/cyclesgo/cycles-go/test/redistest"
)

func TestMain(m *testing.M) {
	redistest.Main(m, redistest.MainOptions{
		LeakCheck: true,
		Setup:     func() (func(), error) { return pgtest.StopShared, nil },
	})
}
