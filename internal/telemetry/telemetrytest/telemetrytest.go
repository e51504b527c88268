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
	var total int64
	for _, dp := range points(tb, r, name, "an int64 sum", func(d metricdata.Aggregation) ([]metricdata.DataPoint[int64], bool) {
		s, ok := d.(metricdata.Sum[int64])
		return s.DataPoints, ok
	}, attrs) {
		total += dp.Value
	}
	return total
}

// Gauge returns the last value of the Int64 gauge named name at the data
// point whose attributes include every attrs pair, and whether there is one.
func (r *Reader) Gauge(tb testing.TB, name string, attrs ...attribute.KeyValue) (int64, bool) {
	tb.Helper()
	return gauge[int64](tb, r, name, "an int64 gauge", attrs)
}

// FloatGauge is Gauge for a Float64 gauge.
func (r *Reader) FloatGauge(tb testing.TB, name string, attrs ...attribute.KeyValue) (float64, bool) {
	tb.Helper()
	return gauge[float64](tb, r, name, "a float64 gauge", attrs)
}

// gauge is the last value of the gauge of N named name at the first data
// point whose attributes include every attrs pair (Gauge, FloatGauge).
func gauge[N int64 | float64](tb testing.TB, r *Reader, name, kind string, attrs []attribute.KeyValue) (N, bool) {
	tb.Helper()
	return first(points(tb, r, name, kind, func(d metricdata.Aggregation) ([]metricdata.DataPoint[N], bool) {
		g, ok := d.(metricdata.Gauge[N])
		return g.DataPoints, ok
	}, attrs))
}

// points collects r and returns the data points of the metric named name
// whose attributes include every attrs pair; of picks them out of the
// metric's data, and a metric of another kind (of answers false) fails tb.
func points[N int64 | float64](tb testing.TB, r *Reader, name, kind string,
	of func(metricdata.Aggregation) ([]metricdata.DataPoint[N], bool), attrs []attribute.KeyValue) []metricdata.DataPoint[N] {
	tb.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		tb.Fatalf("collect metrics: %v", err)
	}
	var out []metricdata.DataPoint[N]
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			dps, ok := of(m.Data)
			if !ok {
				tb.Fatalf("metric %s is %T, not %s", name, m.Data, kind)
			}
			for _, dp := range dps {
				if matches(dp.Attributes, attrs) {
					out = append(out, dp)
				}
			}
		}
	}
	return out
}

func first[N int64 | float64](dps []metricdata.DataPoint[N]) (N, bool) {
	if len(dps) == 0 {
		return 0, false
	}
	return dps[0].Value, true
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
