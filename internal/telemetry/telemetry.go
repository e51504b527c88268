// Package telemetry holds the conventions every domain package follows for
// metrics: a metric.MeterProvider is injected (nil means no-op), instrument
// names follow OTel conventions under the "cycles." namespace, and every
// user-visible effect has a counter that a test asserts moved
// (telemetrytest.Sum).
package telemetry

import (
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// Scope is the instrumentation scope name of cyclesd's meters.
const Scope = "github.com/cyclesgo/cycles-go"

// Meter returns the meter of component from mp, or a no-op meter when mp is nil.
func Meter(mp metric.MeterProvider, component string) metric.Meter {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	return mp.Meter(Scope + "/" + component)
}

// MustCounter creates an Int64Counter or panics (instrument creation only
// fails on an invalid name, a programming error caught by any test).
func MustCounter(m metric.Meter, name, desc string) metric.Int64Counter {
	c, err := m.Int64Counter(name, metric.WithDescription(desc))
	if err != nil {
		panic(err)
	}
	return c
}
