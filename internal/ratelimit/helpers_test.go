package ratelimit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"

	"github.com/cyclesgo/cycles-go/internal/script"
	"github.com/cyclesgo/cycles-go/internal/telemetry/telemetrytest"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
	"github.com/cyclesgo/cycles-go/test/redistest"
	"github.com/cyclesgo/cycles-go/test/scripttest"
)

// env is one backend with a Limiter on it. mr is set on the embedded store,
// whose clock tests can set (SetTime also drives TIME and TTLs there).
type env struct {
	name   string
	client redis.UniversalClient
	mr     *miniredis.Miniredis
	exec   *script.Executor
	lim    *Limiter
	tel    *telemetrytest.Reader
}

func newEnv(t testing.TB, name string, c redis.UniversalClient, mr *miniredis.Miniredis, opts Options) *env {
	t.Helper()
	ex := scripttest.On(t, c)
	tel := telemetrytest.New()
	opts.MeterProvider = tel.Provider
	return &env{name: name, client: c, mr: mr, exec: ex, lim: New(ex, opts), tel: tel}
}

// clocked is an embedded store with a settable clock starting at start.
func clocked(t testing.TB, start time.Time) *env {
	t.Helper()
	c, mr := redistest.Clocked(t, start)
	return newEnv(t, "embedded", c, mr, Options{})
}

// backends is the shared real redis-server and a fresh embedded store.
func backends(t testing.TB) []*env {
	t.Helper()
	return []*env{
		newEnv(t, "redis", redistest.SharedClient(t), nil, Options{}),
		clocked(t, time.Now()),
	}
}

// eachAlgorithm runs body as a subtest per backend and algorithm of algs,
// named <backend>/<algorithm>.
func eachAlgorithm(t *testing.T, algs []Algorithm, body func(t *testing.T, e *env, alg Algorithm)) {
	t.Helper()
	for _, e := range backends(t) {
		for _, alg := range algs {
			t.Run(e.name+"/"+AlgorithmName(alg), func(t *testing.T) { body(t, e, alg) })
		}
	}
}

// oneDay starts, on the real redis-server, a SLIDING_WINDOW scenario whose
// window is a day at least 30 s before the UTC day ends
// (ledgertest.ClearOfBoundary): its window index is Redis TIME / window, so
// at midnight the counts move to the previous-window weight and lose one to
// its rounding (3 hits read back as 2). The embedded store's clock stands
// still unless a test moves it.
func (e *env) oneDay(t testing.TB, alg Algorithm) {
	t.Helper()
	if alg == SlidingWindow && e.mr == nil {
		ledgertest.ClearOfBoundary(t, e.client, 24*time.Hour, 30*time.Second)
	}
}

// at sets the embedded clock to base + ms.
func (e *env) at(base time.Time, ms int64) {
	e.mr.SetTime(base.Add(time.Duration(ms) * time.Millisecond))
}

// uniq is a policy name no other test (or earlier run on the shared server) uses.
func uniq(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

func (e *env) mustPolicy(t testing.TB, p Policy) Policy {
	t.Helper()
	if p.Name == "" {
		p.Name = uniq("p")
	}
	got, err := e.lim.CreatePolicy(context.Background(), p)
	if err != nil {
		t.Fatalf("create policy %+v: %v", p, err)
	}
	return got
}

func (e *env) check(t testing.TB, policy, key string, hits int64) Decision {
	t.Helper()
	d, err := e.lim.Check(context.Background(), policy, key, hits)
	if err != nil {
		t.Fatalf("check %s/%s hits=%d: %v", policy, key, hits, err)
	}
	return d
}

var allAlgorithms = []Algorithm{SlidingLog, CappedLog, SlidingWindow, TokenBucket, PackedLog}
var logAlgorithms = []Algorithm{SlidingLog, CappedLog, PackedLog}

func enc6(v int64) string {
	b := make([]byte, 6)
	for i := 5; i >= 0; i-- {
		b[i] = byte(v & 0xff)
		v >>= 8
	}
	return string(b)
}

func redisZ(score float64, member string) redis.Z { return redis.Z{Score: score, Member: member} }

func attrPolicy(p string) attribute.KeyValue  { return attribute.String("policy", p) }
func attrOutcome(o string) attribute.KeyValue { return attribute.String("outcome", o) }

func attrOp(o string) attribute.KeyValue     { return attribute.String("op", o) }
func attrReason(r string) attribute.KeyValue { return attribute.String("reason", r) }
