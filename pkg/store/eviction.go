package store

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// EvictedKeys reads evicted_keys from INFO stats, summed over the masters of
// a Cluster. Domain packages get it as a plain function (e.g.
// ratelimit.RegisterEvictionMetric), so only this package and pkg/script
// hold a Redis client.
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
