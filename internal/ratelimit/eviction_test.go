package ratelimit

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/store"
	"github.com/cyclesgo/cycles-go/internal/telemetry/telemetrytest"
	"github.com/cyclesgo/cycles-go/test/redistest"
	"github.com/cyclesgo/cycles-go/test/scripttest"
)

// The evicted-keys metric reads INFO: 0 on a healthy server, and it moves
// when Redis evicts limiter keys under a volatile maxmemory-policy.
func TestEvictedKeysMetric(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Args: []string{"--maxmemory", "2mb", "--maxmemory-policy", "volatile-lru"}})
	c := srv.Client(t)
	ex := scripttest.On(t, c)
	tel := telemetrytest.New()
	evicted := func(ctx context.Context) (int64, error) { return store.EvictedKeys(ctx, c) }
	if _, err := RegisterEvictionMetric(tel.Provider, evicted); err != nil {
		t.Fatal(err)
	}
	if got := tel.Sum(t, "cycles.ratelimit.redis.evicted_keys"); got != 0 {
		t.Fatalf("evicted before any pressure: %d", got)
	}
	lim := New(ex, Options{})
	ctx := context.Background()
	p, err := lim.CreatePolicy(ctx, Policy{Name: uniq("ev"), Algorithm: PackedLog, Limit: 1000, WindowMs: 60_000})
	if err != nil {
		t.Fatal(err)
	}
	// ~6 KB rings with TTLs: well past 2 MB, so Redis evicts some.
	for i := 0; i < 1000; i++ {
		if _, err := lim.Check(ctx, p.Name, fmt.Sprintf("k%d", i), 1); err != nil && !strings.Contains(err.Error(), "OOM") {
			t.Fatal(err)
		}
	}
	if got := tel.Sum(t, "cycles.ratelimit.redis.evicted_keys"); got <= 0 {
		t.Fatalf("evicted_keys = %d after memory pressure, want > 0", got)
	}
}

// Redis down: Check fails closed with UNAVAILABLE (and the guard with it).
func TestCheckFailsClosedWhenRedisIsDown(t *testing.T) {
	srv := redistest.Start(t)
	e := newEnv(t, "redis", srv.Client(t), nil, Options{})
	p := e.mustPolicy(t, Policy{Algorithm: TokenBucket, Limit: 10, WindowMs: 1000})
	e.check(t, p.Name, "k", 1)
	srv.Kill()
	_, err := e.lim.Check(context.Background(), p.Name, "k", 1)
	if !apierr.HasCode(err, apierr.Unavailable) {
		t.Fatalf("err = %v, want UNAVAILABLE", err)
	}
	if got := e.tel.Sum(t, "cycles.ratelimit.errors", attrReason("UNAVAILABLE")); got != 1 {
		t.Fatalf("errors{UNAVAILABLE} = %d", got)
	}
}
