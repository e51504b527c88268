package ratelimit

import (
	"context"
	"fmt"
	"math/rand"
	"testing"
	"time"
)

// step is one request of a trace: advance the clock, then ask for hits.
type step struct {
	advance int64
	hits    int64
}

// randomTrace mixes bursts, idle gaps longer than the key TTL, costs > 1 and
// requests landing exactly on, just before and just after window edges.
func randomTrace(r *rand.Rand, limit, window int64, n int) []step {
	out := make([]step, 0, n)
	for len(out) < n {
		var adv int64
		switch k := r.Intn(12); {
		case k < 4:
			adv = 0 // burst: same millisecond
		case k < 7:
			adv = int64(r.Intn(int(window/4 + 1)))
		case k == 7:
			adv = window
		case k == 8:
			adv = window - 1
		case k == 9:
			adv = window + 1
		case k == 10:
			adv = 1
		default:
			adv = 3*window + int64(r.Intn(int(window))) // idle: past the TTL
		}
		hits := int64(1)
		if r.Intn(4) == 0 {
			hits = 1 + int64(r.Intn(int(limit)))
		}
		out = append(out, step{adv, hits})
	}
	return out
}

// TestPackedLogEqualsSlidingLog replays random traces through SLIDING_LOG,
// CAPPED_LOG and PACKED_LOG under one controlled Redis clock and requires
// identical decisions, usage (count saturates at cap / limit where a
// structure cannot hold more), retry and reset times, in enforcing and in
// shadow mode.
func TestPackedLogEqualsSlidingLog(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewSource(seed))
	traces, steps := 40, 150
	if testing.Short() {
		traces = 10
	}
	for tr := 0; tr < traces; tr++ {
		limit := 1 + int64(r.Intn(12))
		window := int64(1 + r.Intn(50))
		if r.Intn(3) == 0 {
			window = int64(100 + r.Intn(5000))
		}
		shadow := r.Intn(3) == 0
		trace := randomTrace(r, limit, window, steps)
		t.Run(fmt.Sprintf("trace%d-limit%d-window%d-shadow%v", tr, limit, window, shadow), func(t *testing.T) {
			e := clocked(t, t0)
			sl := e.mustPolicy(t, Policy{Algorithm: SlidingLog, Limit: limit, WindowMs: window, Shadow: shadow})
			cl := e.mustPolicy(t, Policy{Algorithm: CappedLog, Limit: limit, WindowMs: window, Shadow: shadow,
				Cap: limit + int64(r.Intn(3))})
			pl := e.mustPolicy(t, Policy{Algorithm: PackedLog, Limit: limit, WindowMs: window, Shadow: shadow})
			var now int64
			for i, s := range trace {
				now += s.advance
				e.at(t0, now)
				a := e.check(t, sl.Name, "k", s.hits)
				b := e.check(t, cl.Name, "k", s.hits)
				c := e.check(t, pl.Name, "k", s.hits)
				if !sameDecision(a, b, cl.Cap) || !sameDecision(a, c, limit) {
					t.Fatalf("step %d (t=%d, hits=%d): decisions differ\n sliding %+v\n capped  %+v\n packed  %+v", i, now, s.hits, a, b, c)
				}
			}
		})
	}
}

func sameDecision(ref, got Decision, saturate int64) bool {
	return ref.Allowed == got.Allowed && ref.ShadowDenied == got.ShadowDenied &&
		min(ref.Count, saturate) == got.Count && ref.Remaining == got.Remaining &&
		ref.RetryAfter == got.RetryAfter && ref.ResetAfter == got.ResetAfter
}

// modelLog is the obviously-correct sliding log the scripts must match.
type modelLog struct {
	limit, window int64
	shadow        bool
	hits          []int64
}

func (m *modelLog) check(now, h int64) (allowed, shadowDenied bool, count int64) {
	live := m.hits[:0]
	for _, t := range m.hits {
		if t > now-m.window {
			live = append(live, t)
		}
	}
	m.hits = live
	fits := int64(len(m.hits))+h <= m.limit
	if fits || m.shadow {
		for i := int64(0); i < h; i++ {
			m.hits = append(m.hits, now)
		}
	}
	return fits || m.shadow, m.shadow && !fits, int64(len(m.hits))
}

// On real Redis the clock cannot be set, so each algorithm is replayed
// against the model fed with the Redis TIME the script reports: every log
// algorithm must decide exactly as the model at its own clock.
func TestLogsMatchTheModelOnRealRedis(t *testing.T) {
	e := backends(t)[0]
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewSource(seed))
	for _, alg := range logAlgorithms {
		for _, shadow := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/shadow=%v", AlgorithmName(alg), shadow), func(t *testing.T) {
				p := e.mustPolicy(t, Policy{Algorithm: alg, Limit: 8, WindowMs: 5, Shadow: shadow})
				m := &modelLog{limit: p.Limit, window: p.WindowMs, shadow: shadow}
				for i := 0; i < 400; i++ {
					if r.Intn(10) == 0 {
						time.Sleep(time.Duration(r.Intn(3000)) * time.Microsecond)
					}
					h := int64(1)
					if r.Intn(4) == 0 {
						h = 1 + int64(r.Intn(int(p.Limit)))
					}
					d, err := e.lim.Check(context.Background(), p.Name, "k", h)
					if err != nil {
						t.Fatal(err)
					}
					allowed, sd, count := m.check(d.NowMs, h)
					if alg == CappedLog {
						count = min(count, p.Cap)
					} else if alg == PackedLog {
						count = min(count, p.Limit)
					}
					if d.Allowed != allowed || d.ShadowDenied != sd || d.Count != count {
						t.Fatalf("request %d at %d (hits %d): got %+v, model allowed=%v shadow_denied=%v count=%d", i, d.NowMs, h, d, allowed, sd, count)
					}
				}
			})
		}
	}
}
