package telemetry

import (
	"regexp"
	"runtime"
	"strconv"
	"testing"
)

// The runtime gauges reach the Prometheus exposition under the names the
// soak test scrapes, with the process's real values.
func TestRuntimeMetricsAreExposed(t *testing.T) {
	p := setupFor(t, "runtime-test")
	if err := RegisterRuntime(p.Meter); err != nil {
		t.Fatal(err)
	}
	runtime.GC() // so the live heap has been measured at least once
	body := scrape(p)
	for _, name := range []string{"go_memory_heap_live_bytes", "go_memory_used_bytes", "go_memory_gc_goal_bytes", "go_goroutine_count", "go_gc_cycles_total"} {
		m := regexp.MustCompile(`(?m)^` + name + `\{[^}]*\} ([0-9.e+]+)$`).FindSubmatch(body)
		if m == nil {
			t.Errorf("/metrics has no %s:\n%s", name, body)
			continue
		}
		if v, err := strconv.ParseFloat(string(m[1]), 64); err != nil || v <= 0 {
			t.Errorf("%s = %s, want a positive value", name, m[1])
		}
	}
}
