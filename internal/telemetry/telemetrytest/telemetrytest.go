// Package telemetrytest reads metrics in tests: build a provider with New,
// inject it, act, then assert with Sum that a counter moved.
package telemetrytest

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Reader collects the metrics of one provider.
type Reader struct {
	reader   *sdkmetric.ManualReader
	Provider *sdkmetric.MeterProvider
}

// New returns a provider with a manual reader.
func New() *Reader {
	r := sdkmetric.NewManualReader()
	return &Reader{reader: r, Provider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))}
}

// Sum returns the total of the Int64 sum (counter or up-down counter) named
// name over the data points whose attributes include every attrs pair.
func (r *Reader) Sum(tb testing.TB, name string, attrs ...attribute.KeyValue) int64 {
	tb.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		tb.Fatalf("collect metrics: %v", err)
	}
	var total int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				tb.Fatalf("metric %s is %T, not an int64 sum", name, m.Data)
			}
			for _, dp := range sum.DataPoints {
				if matches(dp.Attributes, attrs) {
					total += dp.Value
				}
			}
		}
	}
	return total
}

func matches(set attribute.Set, want []attribute.KeyValue) bool {
	for _, kv := range want {
		v, ok := set.Value(kv.Key)
		if !ok || v != kv.Value {
			return false
		}
	}
	return true
}

// Gauge returns the last value of the Int64 gauge named name at the data
// point whose attributes include every attrs pair, and whether there is one.
func (r *Reader) Gauge(tb testing.TB, name string, attrs ...attribute.KeyValue) (int64, bool) {
	tb.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		tb.Fatalf("collect metrics: %v", err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			g, ok := m.Data.(metricdata.Gauge[int64])
			if !ok {
				tb.Fatalf("metric %s is %T, not an int64 gauge", name, m.Data)
			}
			for _, dp := range g.DataPoints {
				if matches(dp.Attributes, attrs) {
					return dp.Value, true
				}
			}
		}
	}
	return 0, false
}

// FloatGauge is Gauge for a Float64 gauge.
func (r *Reader) FloatGauge(tb testing.TB, name string, attrs ...attribute.KeyValue) (float64, bool) {
	tb.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		tb.Fatalf("collect metrics: %v", err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			g, ok := m.Data.(metricdata.Gauge[float64])
			if !ok {
				tb.Fatalf("metric %s is %T, not a float64 gauge", name, m.Data)
			}
			for _, dp := range g.DataPoints {
				if matches(dp.Attributes, attrs) {
					return dp.Value, true
				}
			}
		}
	}
	return 0, false
}
