package ratelimit

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"

	"github.com/cyclesgo/cycles-go/pkg/script"
	"github.com/cyclesgo/cycles-go/pkg/telemetry"
)

// RegisterEvictionMetric exports Redis's INFO stats evicted_keys (summed over
// the masters of a Cluster) as the observable counter
// cycles.ratelimit.redis.evicted_keys, read at each metrics collection.
//
// Why: limiter keys are the keys that carry TTLs, so under a volatile-*
// maxmemory-policy they are the first eviction candidates, and an evicted
// limiter key silently resets its window (over-admission). cyclesd refuses
// evicting policies at start unless told otherwise; alert on any increase.
// This reads INFO through Executor.Client(), the infrastructure path; no
// limiter state is read or written here.
func RegisterEvictionMetric(mp metric.MeterProvider, exec *script.Executor) (metric.Registration, error) {
	m := telemetry.Meter(mp, "ratelimit")
	c, err := m.Int64ObservableCounter("cycles.ratelimit.redis.evicted_keys",
		metric.WithDescription("Keys Redis evicted under maxmemory (INFO stats evicted_keys); limiter keys are the first candidates"))
	if err != nil {
		return nil, err
	}
	return m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		n, err := EvictedKeys(ctx, exec.Client())
		if err != nil {
			return nil // no observation rather than a wrong one; health reports outages
		}
		o.ObserveInt64(c, n)
		return nil
	}, c)
}

// EvictedKeys reads evicted_keys from INFO stats (summed over Cluster masters).
func EvictedKeys(ctx context.Context, c redis.UniversalClient) (int64, error) {
	if cc, ok := c.(*redis.ClusterClient); ok {
		var total atomic.Int64 // ForEachMaster runs the callbacks concurrently
		err := cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			v, err := evictedOf(ctx, n)
			if err != nil {
				return err
			}
			total.Add(v)
			return nil
		})
		return total.Load(), err
	}
	return evictedOf(ctx, c)
}

func evictedOf(ctx context.Context, c redis.Cmdable) (int64, error) {
	info, err := c.Info(ctx, "stats").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "evicted_keys:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, nil
}
