package store

import (
	"context"
	"strconv"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/cyclesgo/cycles-go/internal/store/redisinfo"
)

// EvictedKeys reads evicted_keys from INFO stats, summed over the masters of
// a Cluster. Domain packages get it as a plain function (e.g.
// ratelimit.RegisterEvictionMetric), so only this package and internal/script
// hold a Redis client.
func EvictedKeys(ctx context.Context, c redis.UniversalClient) (int64, error) {
	var total atomic.Int64 // forEachMaster runs a Cluster's callbacks concurrently
	err := redisinfo.ForEachMaster(ctx, c, func(ctx context.Context, n redis.Cmdable) error {
		info, err := n.Info(ctx, "stats").Result()
		if err != nil {
			return err
		}
		if v := redisinfo.Field(info, "evicted_keys"); v != "" {
			evicted, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return err
			}
			total.Add(evicted)
		}
		return nil
	})
	return total.Load(), err
}
