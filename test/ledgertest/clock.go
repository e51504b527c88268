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

// ClearOfBoundary keeps a scenario that asserts exact counts inside one
// instance of a calendar window of the scripts (UTC, counted from the Unix
// epoch: time.Minute for the policy rate limits and per-minute quotas,
// time.Hour and 24*time.Hour for the hourly and daily quotas or a rate-limit
// policy's fixed windows): when fewer than margin of the current
// window (Redis TIME modulo window) are left, it sleeps until just past the
// boundary, so the next margin of the scenario's calls share one window
// (it sleeps at most margin, and only then). A window of an hour also
// covers the minute boundary at its end, a day the hour's.
//
// Should the test fail after Redis's clock crossed a boundary of window all
// the same (the scenario outran margin on a loaded machine), the failure
// says so beside the assertion that failed.
func ClearOfBoundary(tb testing.TB, c redis.UniversalClient, window, margin time.Duration) {
	tb.Helper()
	w := window.Milliseconds()
	start := RedisNowMs(tb, c)
	if left := w - start%w; left < margin.Milliseconds() {
		time.Sleep(time.Duration(left+20) * time.Millisecond)
		start = RedisNowMs(tb, c)
	}
	tb.Cleanup(func() {
		if !tb.Failed() {
			return
		}
		tm, err := c.Time(context.Background()).Result()
		if err == nil && tm.UnixMilli()/w != start/w {
			tb.Logf("note: Redis's clock crossed a %v boundary during this test (from %d ms to %d ms): the scenario outran its %v margin",
				window, start, tm.UnixMilli(), margin)
		}
	})
}
