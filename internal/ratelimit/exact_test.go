package ratelimit

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/cyclesgo/cycles-go/internal/apierr"
)

var t0 = time.UnixMilli(1_800_000_000_000)

// A hit is live for exactly window ms: at now = t + window - 1 it still
// counts, at now = t + window it no longer does.
func TestLogsAreExactAtWindowEdges(t *testing.T) {
	for _, alg := range logAlgorithms {
		t.Run(AlgorithmName(alg), func(t *testing.T) {
			e := clocked(t, t0)
			p := e.mustPolicy(t, Policy{Algorithm: alg, Limit: 2, WindowMs: 1000})
			steps := []struct {
				at                  int64
				allowed             bool
				count, retry, reset int64
			}{
				{0, true, 1, 0, 1000},
				{0, true, 2, 0, 1000},
				{999, false, 2, 1, 1},    // both still live: the first expires in 1 ms
				{1000, true, 1, 0, 1000}, // exactly window later: both expired
				{1500, true, 2, 0, 1000},
				{1999, false, 2, 1, 501},
				{2000, true, 2, 0, 1000}, // the t=1000 hit expired, t=1500 is live
			}
			for i, s := range steps {
				e.at(t0, s.at)
				d := e.check(t, p.Name, "edge", 1)
				if d.Allowed != s.allowed || d.Count != s.count || d.RetryAfter.Milliseconds() != s.retry || d.ResetAfter.Milliseconds() != s.reset {
					t.Fatalf("step %d (t=%d): got allowed=%v count=%d retry=%v reset=%v, want %+v", i, s.at, d.Allowed, d.Count, d.RetryAfter, d.ResetAfter, s)
				}
				if d.NowMs != t0.UnixMilli()+s.at {
					t.Fatalf("step %d: decided at %d, want Redis TIME %d", i, d.NowMs, t0.UnixMilli()+s.at)
				}
			}
		})
	}
}

// Stale entries must be pruned before counting: a key full of expired hits
// allows the next request (counting first would deny it). Runs on both
// backends by planting expired state directly.
func TestPruneBeforeCount(t *testing.T) {
	eachAlgorithm(t, logAlgorithms, func(t *testing.T, e *env, alg Algorithm) {
		ctx := context.Background()
		p := e.mustPolicy(t, Policy{Algorithm: alg, Limit: 5, WindowMs: 60_000})
		rk := StateKey(p.Name, "stale")
		if alg == PackedLog {
			// Ring full of hits at t = 1 ms (epoch), all long expired.
			hdr := "P" + enc6(5) + enc6(5) + enc6(0) + enc6(1)
			slots := ""
			for i := 0; i < 5; i++ {
				slots += enc6(1)
			}
			if err := e.client.Set(ctx, rk, hdr+slots, 0).Err(); err != nil {
				t.Fatal(err)
			}
		} else {
			for i := 1; i <= 5; i++ {
				if err := e.client.ZAdd(ctx, rk, redisZ(1, fmt.Sprintf("a%d", i))).Err(); err != nil {
					t.Fatal(err)
				}
			}
		}
		d := e.check(t, p.Name, "stale", 1)
		if !d.Allowed || d.Count != 1 {
			t.Fatalf("after expired hits: %+v, want allowed with count 1", d)
		}
		if alg != PackedLog {
			if n := e.client.ZCard(ctx, rk).Val(); n != 1 {
				t.Fatalf("zcard = %d, want the 5 stale members pruned", n)
			}
		}
	})
}

// The scripts take no client time: an extra time-like ARGV changes nothing,
// the stored hit carries Redis TIME.
func TestClientTimeIsIgnored(t *testing.T) {
	e := clocked(t, t0)
	ctx := context.Background()
	rk := StateKey(uniq("p"), "k")
	bogus := strconv.FormatInt(t0.UnixMilli()+1e9, 10)
	raw, err := e.exec.RunFlat(ctx, scriptSlidingLog.Def, []string{rk}, "5", "1000", "1", "0", "1100", bogus, bogus)
	if err != nil {
		t.Fatal(err)
	}
	zs := e.client.ZRangeWithScores(ctx, rk, 0, -1).Val()
	if len(zs) != 1 || int64(zs[0].Score) != t0.UnixMilli() {
		t.Fatalf("stored %v (result %v), want one hit at Redis TIME %d", zs, raw, t0.UnixMilli())
	}
}

// If Redis TIME steps backwards the logs keep their order: the newest hit's
// time is used, so decisions never see a hit "from the future".
func TestClockStepBackIsClamped(t *testing.T) {
	for _, alg := range logAlgorithms {
		t.Run(AlgorithmName(alg), func(t *testing.T) {
			e := clocked(t, t0)
			p := e.mustPolicy(t, Policy{Algorithm: alg, Limit: 2, WindowMs: 1000})
			e.at(t0, 500)
			e.check(t, p.Name, "k", 1)
			e.at(t0, 100) // back 400 ms
			d := e.check(t, p.Name, "k", 1)
			if !d.Allowed || d.Count != 2 || d.NowMs != t0.UnixMilli()+500 {
				t.Fatalf("after step back: %+v", d)
			}
			e.at(t0, 1499)
			if d := e.check(t, p.Name, "k", 1); d.Allowed {
				t.Fatalf("t=1499: %+v, both hits (stored at 500) are live", d)
			}
			e.at(t0, 1500)
			if d := e.check(t, p.Name, "k", 1); !d.Allowed {
				t.Fatalf("t=1500: %+v", d)
			}
		})
	}
}

// Costs: a request of h hits takes h of the limit, on every algorithm;
// h > limit is refused as INVALID_REQUEST (it could never pass).
func TestCosts(t *testing.T) {
	eachAlgorithm(t, allAlgorithms, func(t *testing.T, e *env, alg Algorithm) {
		p := e.mustPolicy(t, Policy{Algorithm: alg, Limit: 5, WindowMs: 86_400_000})
		e.oneDay(t, alg)
		for i, s := range []struct {
			hits      int64
			allowed   bool
			count     int64
			remaining int64
		}{{3, true, 3, 2}, {3, false, 3, 2}, {2, true, 5, 0}, {1, false, 5, 0}} {
			d := e.check(t, p.Name, "cost", s.hits)
			if d.Allowed != s.allowed || d.Count != s.count || d.Remaining != s.remaining {
				t.Fatalf("step %d hits=%d: %+v, want %+v", i, s.hits, d, s)
			}
		}
		_, err := e.lim.Check(context.Background(), p.Name, "cost", 6)
		if !apierr.HasCode(err, apierr.InvalidRequest) {
			t.Fatalf("hits > limit: err %v, want INVALID_REQUEST", err)
		}
	})
}

// Shadow mode decides and counts but never denies; the would-be denial is
// reported and counted in cycles.ratelimit.decisions{outcome=shadow_denied}.
func TestShadowMode(t *testing.T) {
	eachAlgorithm(t, allAlgorithms, func(t *testing.T, e *env, alg Algorithm) {
		p := e.mustPolicy(t, Policy{Algorithm: alg, Limit: 2, WindowMs: 86_400_000, Shadow: true})
		for i := 1; i <= 4; i++ {
			d := e.check(t, p.Name, "k", 1)
			wantShadow := i > 2
			if !d.Allowed || d.ShadowDenied != wantShadow || d.RetryAfter != 0 {
				t.Fatalf("hit %d: %+v", i, d)
			}
		}
		if got := e.tel.Sum(t, "cycles.ratelimit.decisions", attrPolicy(p.Name), attrOutcome("shadow_denied")); got != 2 {
			t.Fatalf("shadow_denied decisions = %d, want 2", got)
		}
		if got := e.tel.Sum(t, "cycles.ratelimit.decisions", attrPolicy(p.Name), attrOutcome("denied")); got != 0 {
			t.Fatalf("denied decisions = %d, want 0 in shadow mode", got)
		}
	})
}

// A flood of served requests (shadow mode: everything is served) grows the
// plain sliding log with the flood, while CAPPED_LOG stays at its cap and
// PACKED_LOG at its fixed size, with identical decisions.
func TestCapBoundsTheLogUnderAFlood(t *testing.T) {
	for _, e := range backends(t) {
		t.Run(e.name, func(t *testing.T) {
			ctx := context.Background()
			const limit, flood = 10, 500
			sl := e.mustPolicy(t, Policy{Algorithm: SlidingLog, Limit: limit, WindowMs: 86_400_000, Shadow: true})
			cl := e.mustPolicy(t, Policy{Algorithm: CappedLog, Limit: limit, WindowMs: 86_400_000, Shadow: true})
			pl := e.mustPolicy(t, Policy{Algorithm: PackedLog, Limit: limit, WindowMs: 86_400_000, Shadow: true})
			if cl.Cap != 12 {
				t.Fatalf("default cap = %d, want ceil(1.2 x 10) = 12", cl.Cap)
			}
			for i := 1; i <= flood; i++ {
				a, b, c := e.check(t, sl.Name, "f", 1), e.check(t, cl.Name, "f", 1), e.check(t, pl.Name, "f", 1)
				if a.ShadowDenied != (i > limit) || b.ShadowDenied != a.ShadowDenied || c.ShadowDenied != a.ShadowDenied {
					t.Fatalf("hit %d: decisions differ: %+v / %+v / %+v", i, a, b, c)
				}
			}
			if n := e.client.ZCard(ctx, StateKey(sl.Name, "f")).Val(); n != flood {
				t.Fatalf("sliding log holds %d, want %d (every served hit)", n, flood)
			}
			if n := e.client.ZCard(ctx, StateKey(cl.Name, "f")).Val(); n != cl.Cap {
				t.Fatalf("capped log holds %d, want cap %d", n, cl.Cap)
			}
			if n := e.client.StrLen(ctx, StateKey(pl.Name, "f")).Val(); n != 25+6*limit {
				t.Fatalf("packed log is %d bytes, want %d", n, 25+6*limit)
			}
			// Enforcing: denied hits are not recorded, so no log passes the limit.
			en := e.mustPolicy(t, Policy{Algorithm: SlidingLog, Limit: limit, WindowMs: 86_400_000})
			for i := 0; i < 100; i++ {
				e.check(t, en.Name, "f", 1)
			}
			if n := e.client.ZCard(ctx, StateKey(en.Name, "f")).Val(); n != limit {
				t.Fatalf("enforcing log holds %d, want %d", n, limit)
			}
		})
	}
}

// Every served request refreshes the key's TTL to window + slack (+ one
// window for SLIDING_WINDOW); an idle key then expires by itself.
func TestTTLRefreshAndIdleExpiry(t *testing.T) {
	eachAlgorithm(t, allAlgorithms, func(t *testing.T, e *env, alg Algorithm) {
		ctx := context.Background()
		p := e.mustPolicy(t, Policy{Algorithm: alg, Limit: 100, WindowMs: 60_000, SlackMs: 7_000})
		e.check(t, p.Name, "ttl", 1)
		want := p.TTL().Milliseconds()
		if alg == SlidingWindow && want != 127_000 || alg != SlidingWindow && want != 67_000 {
			t.Fatalf("policy TTL %d", want)
		}
		pttl := e.client.PTTL(ctx, StateKey(p.Name, "ttl")).Val().Milliseconds()
		if pttl <= want-5_000 || pttl > want {
			t.Fatalf("PTTL = %d ms, want (%d, %d]", pttl, want-5_000, want)
		}
	})
	for _, alg := range allAlgorithms {
		t.Run("expiry/"+AlgorithmName(alg), func(t *testing.T) {
			ctx := context.Background()
			e := clocked(t, t0)
			p := e.mustPolicy(t, Policy{Algorithm: alg, Limit: 100, WindowMs: 1000, SlackMs: 100})
			ttl := p.TTL().Milliseconds()
			rk := StateKey(p.Name, "idle")
			e.check(t, p.Name, "idle", 1)
			e.at(t0, 900)
			e.check(t, p.Name, "idle", 1) // refreshes: now expires at 900 + ttl
			e.at(t0, ttl+50)
			if e.client.Exists(ctx, rk).Val() != 1 {
				t.Fatal("key expired early: the TTL was not refreshed by the second hit")
			}
			e.at(t0, 900+ttl)
			if e.client.Exists(ctx, rk).Val() != 0 {
				t.Fatal("idle key did not expire after window + slack")
			}
		})
	}
}

// TOKEN_BUCKET: a full burst, then one token per window/limit ms.
func TestTokenBucketRefill(t *testing.T) {
	e := clocked(t, t0)
	p := e.mustPolicy(t, Policy{Algorithm: TokenBucket, Limit: 10, WindowMs: 1000})
	for i := 0; i < 10; i++ {
		if d := e.check(t, p.Name, "b", 1); !d.Allowed {
			t.Fatalf("burst hit %d denied: %+v", i, d)
		}
	}
	d := e.check(t, p.Name, "b", 1)
	if d.Allowed || d.RetryAfter != 100*time.Millisecond || d.ResetAfter != time.Second {
		t.Fatalf("11th: %+v, want denied, retry 100ms, reset 1s", d)
	}
	e.at(t0, 99)
	if d := e.check(t, p.Name, "b", 1); d.Allowed || d.RetryAfter != time.Millisecond {
		t.Fatalf("t=99: %+v", d)
	}
	e.at(t0, 100)
	if d := e.check(t, p.Name, "b", 1); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("t=100: %+v", d)
	}
	e.at(t0, 5000) // long idle: full again, never above capacity
	if d := e.check(t, p.Name, "b", 1); !d.Allowed || d.Remaining != 9 {
		t.Fatalf("after idle: %+v", d)
	}
}

// SLIDING_WINDOW weighs the previous window by its overlap.
func TestSlidingWindowWeighting(t *testing.T) {
	e := clocked(t, t0) // t0 is a multiple of 1000 ms
	p := e.mustPolicy(t, Policy{Algorithm: SlidingWindow, Limit: 10, WindowMs: 1000})
	e.at(t0, 500)
	if d := e.check(t, p.Name, "w", 10); !d.Allowed {
		t.Fatalf("t=500: %+v", d)
	}
	e.at(t0, 1000) // previous window weighs 100%
	d := e.check(t, p.Name, "w", 1)
	if d.Allowed || d.Count != 10 || d.RetryAfter != 100*time.Millisecond {
		t.Fatalf("t=1000: %+v, want denied with retry 100ms", d)
	}
	e.at(t0, 1100) // 90%: 9 + 1 fits
	if d := e.check(t, p.Name, "w", 1); !d.Allowed || d.Count != 10 {
		t.Fatalf("t=1100: %+v", d)
	}
	if d := e.check(t, p.Name, "w", 1); d.Allowed || d.RetryAfter != 100*time.Millisecond {
		t.Fatalf("t=1100 second: %+v", d)
	}
	e.at(t0, 3000) // two windows later: all forgotten
	if d := e.check(t, p.Name, "w", 10); !d.Allowed {
		t.Fatalf("t=3000: %+v", d)
	}
}

// Changing a policy's algorithm reuses the key name: the new script resets
// the other algorithm's state instead of failing with WRONGTYPE.
func TestAlgorithmChangeResetsState(t *testing.T) {
	for _, e := range backends(t) {
		t.Run(e.name, func(t *testing.T) {
			p := e.mustPolicy(t, Policy{Algorithm: SlidingLog, Limit: 1, WindowMs: 86_400_000})
			e.check(t, p.Name, "k", 1)
			for _, alg := range []Algorithm{TokenBucket, SlidingWindow, PackedLog, CappedLog, TokenBucket, PackedLog, SlidingWindow, SlidingLog} {
				p.Algorithm, p.Cap = alg, 0
				if _, err := e.lim.UpdatePolicy(context.Background(), p); err != nil {
					t.Fatal(err)
				}
				if d := e.check(t, p.Name, "k", 1); !d.Allowed {
					t.Fatalf("%s after switch: %+v, want fresh state", AlgorithmName(alg), d)
				}
			}
		})
	}
}

// A PACKED_LOG whose limit changes re-packs its newest live hits.
func TestPackedLogLimitChange(t *testing.T) {
	e := clocked(t, t0)
	p := e.mustPolicy(t, Policy{Algorithm: PackedLog, Limit: 5, WindowMs: 1000})
	for i := 0; i < 3; i++ {
		e.at(t0, int64(i*100))
		e.check(t, p.Name, "k", 1)
	}
	p.Limit = 2
	if _, err := e.lim.UpdatePolicy(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	d := e.check(t, p.Name, "k", 1)
	if d.Allowed || d.Count != 2 || d.RetryAfter != 900*time.Millisecond {
		t.Fatalf("after lowering: %+v, want denied until the hit at t=100 expires", d)
	}
	p.Limit = 4
	if _, err := e.lim.UpdatePolicy(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	if d := e.check(t, p.Name, "k", 2); !d.Allowed || d.Count != 4 {
		t.Fatalf("after raising: %+v", d)
	}
	if n := e.client.StrLen(context.Background(), StateKey(p.Name, "k")).Val(); n != 25+6*4 {
		t.Fatalf("ring is %d bytes, want %d", n, 25+6*4)
	}
}
