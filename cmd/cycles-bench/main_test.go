package main

import (
	"testing"

	"github.com/cyclesgo/cycles-go/test/redistest"
)

// TestMain proves the bench's tests leave nothing behind: no temp dir, no
// redis-server or cyclesd, no goroutine (redistest.Main).
func TestMain(m *testing.M) { redistest.Main(m, redistest.MainOptions{LeakCheck: true}) }
