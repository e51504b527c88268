package ledgertest

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisNowMs is Redis TIME in ms: the scripts' only clock, so the one a test
// reasons about.
func RedisNowMs(tb testing.TB, c redis.UniversalClient) int64 {
	tb.Helper()
	tm, err := c.Time(context.Background()).Result()
	if err != nil {
		tb.Fatalf("redis TIME: %v", err)
	}
	return tm.UnixMilli()
}

// FreshMinute waits, when fewer than 8 s of the current Redis TIME minute
// are left, for the next one, so a scenario's calls share one per-minute
// rate window (it waits at most 8 s, and only then).
func FreshMinute(tb testing.TB, c redis.UniversalClient) {
	tb.Helper()
	if left := 60_000 - RedisNowMs(tb, c)%60_000; left < 8_000 {
		time.Sleep(time.Duration(left+20) * time.Millisecond)
	}
}
