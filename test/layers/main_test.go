package layers

import (
	"testing"

	"github.com/cyclesgo/cycles-go/test/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m, redistest.MainOptions{LeakCheck: true}) }
