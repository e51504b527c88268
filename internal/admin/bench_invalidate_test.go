package admin

import (
	"context"
	"slices"
	"sort"
	"testing"
	"time"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
)

// BenchmarkChangeToRefusal measures, across two replicas on one Redis, the
// time from a key change committed on replica a (RevokeApiKey, or an
// UpdateApiKey dropping reservations:create) to replica b, which caches
// verifications for an hour, judging the key by the change: the pub/sub
// invalidation's delay. b polls every 100 µs. Reported: p50 and max in µs.
func BenchmarkChangeToRefusal(b *testing.B) {
	for _, kind := range []string{"revoke", "permission"} {
		b.Run(kind, func(b *testing.B) {
			long := func(o *Options) { o.KeyCacheTTL = time.Hour }
			ra := newEnv(b, long)
			rb := newEnvOn(b, ra.rdb, long)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- rb.svc.WatchKeyInvalidations(ctx) }()
			defer func() { cancel(); <-done }()
			time.Sleep(200 * time.Millisecond) // the subscription is live
			tenant := ra.createTenant()
			var lat []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				k := ra.createKey(tenant)
				if _, err := rb.svc.VerifyAPIKey(ctx, k.GetSecret()); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				start := time.Now()
				var err error
				if kind == "revoke" {
					_, err = ra.svc.RevokeApiKey(ra.ctx, &cyclesv1.RevokeApiKeyRequest{TenantId: tenant, KeyId: k.GetApiKey().GetKeyId()})
				} else {
					_, err = ra.svc.UpdateApiKey(ra.ctx, &cyclesv1.UpdateApiKeyRequest{TenantId: tenant, KeyId: k.GetApiKey().GetKeyId(),
						Permissions: &cyclesv1.ApiKeyStrings{Values: []string{"balances:read"}}})
				}
				if err != nil {
					b.Fatal(err)
				}
				for {
					p, err := rb.svc.VerifyAPIKey(ctx, k.GetSecret())
					if err != nil || !slices.Contains(p.Permissions, "reservations:create") {
						break
					}
					if time.Since(start) > 5*time.Second {
						b.Fatal("replica b never saw the change")
					}
					time.Sleep(100 * time.Microsecond)
				}
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)-1].Microseconds()), "max-µs")
		})
	}
}
