package ratelimit

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/cyclesgo/cycles-go/internal/telemetry"
)

// RegisterEvictionMetric exports Redis's evicted-keys count (read by
// evicted, e.g. store.EvictedKeys: INFO stats summed over the masters of a
// Cluster) as the observable counter cycles.ratelimit.redis.evicted_keys,
// read at each metrics collection.
//
// Why: limiter keys are the keys that carry TTLs, so under a volatile-*
// maxmemory-policy they are the first eviction candidates, and an evicted
// limiter key silently resets its window (over-admission). cyclesd refuses
// evicting policies at start unless told otherwise; alert on any increase.
// The reader is passed in so this package holds no Redis client; no limiter
// state is read or written here.
func RegisterEvictionMetric(mp metric.MeterProvider, evicted func(context.Context) (int64, error)) (metric.Registration, error) {
	m := telemetry.Meter(mp, "ratelimit")
	c, err := m.Int64ObservableCounter("cycles.ratelimit.redis.evicted_keys",
		metric.WithDescription("Keys Redis evicted under maxmemory (INFO stats evicted_keys); limiter keys are the first candidates"))
	if err != nil {
		return nil, err
	}
	return m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		n, err := evicted(ctx)
		if err != nil {
			return nil // no observation rather than a wrong one; health reports outages
		}
		o.ObserveInt64(c, n)
		return nil
	}, c)
}
