package ratelimit

import (
	"context"
	"fmt"
	"math/rand"
	"net"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/test/redistest"
)

// BenchmarkMemoryPerEntry measures, on real Redis, MEMORY USAGE (every
// element sampled) of one key holding N hits, for each algorithm, and
// reports bytes per stored hit. Run with -benchtime=1x:
//
//	go test ./internal/ratelimit -run '^$' -bench MemoryPerEntry -benchtime=1x
//
// "proj-GB" is the projected footprint of 50,000 keys x N stored hits.
func BenchmarkMemoryPerEntry(b *testing.B) {
	e := newEnv(b, "redis", redistest.Start(b).Client(b), nil, Options{})
	ctx := context.Background()
	for _, alg := range allAlgorithms {
		for _, n := range []int64{10, 128, 1000, 10000} {
			b.Run(fmt.Sprintf("%s/entries=%d", AlgorithmName(alg), n), func(b *testing.B) {
				p := e.mustPolicy(b, Policy{Algorithm: alg, Limit: n, WindowMs: 86_400_000})
				var usage int64
				for i := 0; i < b.N; i++ {
					key := fmt.Sprintf("mem-%d", i)
					for j := int64(0); j < n; j++ {
						if d := e.check(b, p.Name, key, 1); !d.Allowed {
							b.Fatalf("hit %d denied", j)
						}
					}
					var err error
					usage, err = e.client.MemoryUsage(ctx, StateKey(p.Name, key), 0).Result()
					if err != nil {
						b.Fatal(err)
					}
				}
				// Marginal cost per hit: minus the same key holding one hit
				// (key name, object header and allocator overhead).
				// (A limit-1 policy with an equally long name, so a PACKED_LOG
				// reference ring has one slot, not n.)
				p1 := e.mustPolicy(b, Policy{Algorithm: alg, Limit: 1, WindowMs: 86_400_000})
				e.check(b, p1.Name, "mem-0", 1)
				one, err := e.client.MemoryUsage(ctx, StateKey(p1.Name, "mem-0"), 0).Result()
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(usage-one)/float64(n-1), "B/marginal")
				b.ReportMetric(float64(usage), "B/key")
				b.ReportMetric(float64(usage)/float64(n), "B/entry")
				b.ReportMetric(float64(usage)*50_000/1e9, "proj-GB")
			})
		}
	}
}

// BenchmarkCheckGRPC measures Check through the gRPC service (handler,
// validation, principal, one EVALSHA) over TCP loopback against a private
// real redis-server, at 1 and 50 concurrent clients sharing one connection.
// Keys are drawn from 10,000 per algorithm (limit 100/min, so most allowed).
// Reports checks/s and p50/p99 latency:
//
//	go test ./internal/ratelimit -run '^$' -bench CheckGRPC -benchtime=20000x
func BenchmarkCheckGRPC(b *testing.B) {
	srv := redistest.Start(b)
	e := newEnv(b, "redis", srv.Client(b), nil, Options{})
	if err := e.exec.Load(context.Background()); err != nil {
		b.Fatal(err)
	}
	client := benchServer(b, e.lim)
	for _, alg := range allAlgorithms {
		p := e.mustPolicy(b, Policy{Algorithm: alg, Limit: 100, WindowMs: 60_000})
		for _, clients := range []int{1, 50} {
			b.Run(fmt.Sprintf("%s/clients=%d", AlgorithmName(alg), clients), func(b *testing.B) {
				lat := make([]time.Duration, b.N)
				var next atomic.Int64
				var wg sync.WaitGroup
				b.ResetTimer()
				start := time.Now()
				for c := 0; c < clients; c++ {
					wg.Add(1)
					go func(seed int64) {
						defer wg.Done()
						r := rand.New(rand.NewSource(seed))
						for {
							i := next.Add(1) - 1
							if i >= int64(b.N) {
								return
							}
							req := &cyclesv1.CheckRequest{Policy: p.Name, Key: fmt.Sprintf("user-%d", r.Intn(10_000))}
							t := time.Now()
							if _, err := client.Check(context.Background(), req); err != nil {
								b.Error(err)
								return
							}
							lat[i] = time.Since(t)
						}
					}(int64(c))
				}
				wg.Wait()
				elapsed := time.Since(start)
				b.StopTimer()
				sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
				b.ReportMetric(float64(b.N)/elapsed.Seconds(), "checks/s")
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			})
		}
	}
}

// benchServer serves a minimal RateLimitService (Check only) backed by l:
// the same work as the real handler (principal -> namespaced key, Check).
func benchServer(b *testing.B, l *Limiter) cyclesv1.RateLimitServiceClient {
	b.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	withTenant := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return h(auth.WithPrincipal(ctx, auth.Principal{Tenant: "bench", KeyID: "0123456789abcdef"}), req)
	}
	s := grpc.NewServer(grpc.UnaryInterceptor(withTenant))
	cyclesv1.RegisterRateLimitServiceServer(s, &benchHandler{l: l})
	go func() { _ = s.Serve(lis) }()
	b.Cleanup(s.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	return cyclesv1.NewRateLimitServiceClient(conn)
}

// benchHandler mirrors ratelimitapi.Handler.Check (which cannot be imported
// here without a cycle).
type benchHandler struct {
	cyclesv1.UnimplementedRateLimitServiceServer
	l *Limiter
}

func (h *benchHandler) Check(ctx context.Context, r *cyclesv1.CheckRequest) (*cyclesv1.CheckResponse, error) {
	key, err := CallerKey(ctx, r.GetKey())
	if err != nil {
		return nil, err
	}
	d, err := h.l.Check(ctx, r.GetPolicy(), key, 1)
	if err != nil {
		return nil, err
	}
	return &cyclesv1.CheckResponse{Allowed: d.Allowed, Count: d.Count, Remaining: d.Remaining, Limit: d.Limit,
		ResetAfterMs: d.ResetAfter.Milliseconds(), RetryAfterMs: d.RetryAfter.Milliseconds()}, nil
}

// BenchmarkScriptCost runs Check directly (no gRPC) from 50 goroutines and
// reports the Redis-side cost of one check: usec_per_call of EVALSHA from
// INFO commandstats (Redis is single-threaded, so 1e6 / that is the ceiling
// of checks per second one Redis core can serve).
//
//	go test ./internal/ratelimit -run '^$' -bench ScriptCost -benchtime=20000x
func BenchmarkScriptCost(b *testing.B) {
	srv := redistest.Start(b)
	e := newEnv(b, "redis", srv.Client(b), nil, Options{})
	ctx := context.Background()
	for _, alg := range allAlgorithms {
		p := e.mustPolicy(b, Policy{Algorithm: alg, Limit: 100, WindowMs: 60_000})
		b.Run(AlgorithmName(alg), func(b *testing.B) {
			if err := e.client.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			var seed atomic.Int64
			b.SetParallelism(25) // 50 goroutines on 2 CPUs
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				r := rand.New(rand.NewSource(seed.Add(1)))
				for pb.Next() {
					if _, err := e.lim.Check(ctx, p.Name, fmt.Sprintf("user-%d", r.Intn(10_000)), 1); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			info := e.client.Info(ctx, "commandstats").Val()
			for _, line := range strings.Split(info, "\n") {
				if strings.HasPrefix(line, "cmdstat_evalsha:") {
					for _, f := range strings.Split(strings.TrimSpace(strings.TrimPrefix(line, "cmdstat_evalsha:")), ",") {
						if v, ok := strings.CutPrefix(f, "usec_per_call="); ok {
							var us float64
							fmt.Sscanf(v, "%g", &us)
							b.ReportMetric(us, "redis-µs/check")
						}
					}
				}
			}
		})
	}
}
