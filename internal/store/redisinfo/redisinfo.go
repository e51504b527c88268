// Package redisinfo is the part of internal/store that reads what cyclesd
// and its tests need to know about the Redis servers behind a client: their
// INFO fields and whether every master runs Redis 7. It depends on go-redis
// only, so the store and the test harness (test/redistest, which
// internal/config's tests import) share one definition without an import
// cycle.
package redisinfo

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// ForEachMaster runs f on the single node or on every Cluster master (there
// concurrently: f must be safe for that).
func ForEachMaster(ctx context.Context, c redis.UniversalClient, f func(context.Context, redis.Cmdable) error) error {
	if cc, ok := c.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return f(ctx, n) })
	}
	return f(ctx, c)
}

// Field is the value of field in an INFO reply ("" when absent).
func Field(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// Redis7 reports whether every master behind c runs Redis 7 or later
// (Functions, FCALL and script flag lines exist there). cyclesd decides with
// it how it sends scripts (internal/store); test/redistest, how the suites
// send them.
func Redis7(ctx context.Context, c redis.UniversalClient) (bool, error) {
	var old atomic.Bool
	err := ForEachMaster(ctx, c, func(ctx context.Context, c redis.Cmdable) error {
		info, err := c.Info(ctx, "server").Result()
		if err != nil {
			return err
		}
		major, _, _ := strings.Cut(Field(info, "redis_version"), ".")
		if n, err := strconv.Atoi(major); err != nil || n < 7 {
			old.Store(true)
		}
		return nil
	})
	return !old.Load(), err
}
