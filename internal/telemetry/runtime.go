package telemetry

import (
	"context"
	"errors"
	"fmt"
	"runtime/metrics"

	"go.opentelemetry.io/otel/metric"
)

// Go runtime gauges (Prometheus names in parentheses). The soak test reads
// go.memory.heap.live from /metrics to check that the server's heap after GC
// stays flat under sustained load.
const (
	// RuntimeHeapLive is the heap the last GC marked live, i.e. the heap
	// after GC (go_memory_heap_live_bytes).
	RuntimeHeapLive = "go.memory.heap.live"
	// RuntimeMemoryUsed is the memory mapped by the Go runtime minus what it
	// returned to the OS (go_memory_used_bytes).
	RuntimeMemoryUsed = "go.memory.used"
	// RuntimeGCGoal is the heap size that triggers the next GC (go_memory_gc_goal_bytes).
	RuntimeGCGoal = "go.memory.gc.goal"
	// RuntimeGoroutines is the number of live goroutines (go_goroutine_count).
	RuntimeGoroutines = "go.goroutine.count"
	// RuntimeGCCycles counts completed GC cycles (go_gc_cycles_total).
	RuntimeGCCycles = "go.gc.cycles"
)

// runtimeSamples are the runtime/metrics read at each collection, in the
// order the callback uses them.
var runtimeSamples = []string{
	"/gc/heap/live:bytes",
	"/memory/classes/total:bytes",
	"/memory/classes/heap/released:bytes",
	"/gc/heap/goal:bytes",
	"/sched/goroutines:goroutines",
	"/gc/cycles/total:gc-cycles",
}

// RegisterRuntime registers the Go runtime gauges on mp. They are read
// (runtime/metrics, no stop-the-world) only when the provider collects, e.g.
// on each /metrics scrape.
func RegisterRuntime(mp metric.MeterProvider) error {
	m := Meter(mp, "runtime")
	var errs []error // of the instruments' creation, reported together
	gauge := func(name, unit, desc string) metric.Int64ObservableGauge {
		g, err := m.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return g
	}
	live := gauge(RuntimeHeapLive, "By", "Heap bytes marked live by the last GC (the heap after GC)")
	used := gauge(RuntimeMemoryUsed, "By", "Memory mapped by the Go runtime, minus memory released to the OS")
	goal := gauge(RuntimeGCGoal, "By", "Heap size at which the next GC starts")
	goroutines := gauge(RuntimeGoroutines, "{goroutine}", "Live goroutines")
	cycles, err := m.Int64ObservableCounter(RuntimeGCCycles, metric.WithUnit("{gc_cycle}"), metric.WithDescription("Completed GC cycles"))
	if err := errors.Join(append(errs, err)...); err != nil {
		return fmt.Errorf("runtime metrics: %w", err)
	}
	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		// Fresh samples per collection: collections may run concurrently.
		s := make([]metrics.Sample, len(runtimeSamples))
		for i, name := range runtimeSamples {
			s[i].Name = name
		}
		metrics.Read(s)
		v := func(i int) (int64, bool) {
			if s[i].Value.Kind() != metrics.KindUint64 {
				return 0, false // not supported by this Go version
			}
			return int64(s[i].Value.Uint64()), true
		}
		if n, ok := v(0); ok {
			o.ObserveInt64(live, n)
		}
		if total, ok := v(1); ok {
			released, _ := v(2)
			o.ObserveInt64(used, total-released)
		}
		if n, ok := v(3); ok {
			o.ObserveInt64(goal, n)
		}
		if n, ok := v(4); ok {
			o.ObserveInt64(goroutines, n)
		}
		if n, ok := v(5); ok {
			o.ObserveInt64(cycles, n)
		}
		return nil
	}, live, used, goal, goroutines, cycles)
	if err != nil {
		return fmt.Errorf("runtime metrics: %w", err)
	}
	return nil
}
