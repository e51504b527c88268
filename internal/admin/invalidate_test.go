package admin

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/test/errtest"
)

// watching runs e's WatchKeyInvalidations until the test ends and waits
// until its subscription is live.
func (e *env) watching(t *testing.T) {
	t.Helper()
	runUntilCleanup(t, "watch", e.svc.WatchKeyInvalidations)
	for i := 0; ; i++ {
		n := e.rdb.PubSubNumSub(context.Background(), keys.KeyInvalidations).Val()[keys.KeyInvalidations]
		if n > 0 {
			return
		}
		if i > 500 {
			t.Fatal("the invalidation subscription never started")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// refusedSoon polls until verify is refused; false if it never is (within
// a bound far below the replica's cache TTL of an hour).
func refusedSoon(t *testing.T, verify func() error) bool {
	t.Helper()
	for i := 0; i < 300; i++ {
		err := verify()
		if err != nil {
			wantRefused(t, err, codes.Unauthenticated, apierr.Unauthorized)
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// twoReplicas is two admin services on one Redis, each trusting its key
// cache for an hour, b listening for invalidations, and a key of a new
// tenant made on a.
func twoReplicas(t *testing.T) (a, b *env, tenant string, k *cyclesv1.CreateApiKeyResponse) {
	t.Helper()
	long := func(o *Options) { o.KeyCacheTTL = time.Hour }
	a = newEnv(t, long)
	b = newEnvOn(t, a.rdb, long)
	b.watching(t)
	tenant = a.createTenant()
	return a, b, tenant, a.createKey(tenant)
}

// A revocation on one replica reaches another replica's cache through
// pub/sub, although that replica would trust its cache for an hour.
func TestRevocationReachesOtherReplicas(t *testing.T) {
	a, b, tenant, k := twoReplicas(t)
	ctx := context.Background()
	if _, err := b.svc.VerifyAPIKey(ctx, k.GetSecret()); err != nil {
		t.Fatal(err)
	}
	if _, err := b.svc.VerifyAPIKey(ctx, k.GetSecret()); err != nil || b.metrics.Sum(t, "cycles.auth.cache_hits") != 1 {
		t.Fatalf("replica b must answer from its cache: %v", err)
	}
	mustCall(t, a.ctx, &cyclesv1.RevokeApiKeyRequest{TenantId: tenant, KeyId: k.GetApiKey().GetKeyId()}, a.svc.RevokeApiKey)
	if !refusedSoon(t, func() error { return errtest.ErrOf(b.svc.VerifyAPIKey(ctx, k.GetSecret())) }) {
		t.Fatal("replica b still accepts the revoked key")
	}
	if n := b.metrics.Sum(t, "cycles.auth.invalidations_received"); n < 1 {
		t.Fatalf("invalidations_received = %d", n)
	}
}

// InvalidateKey (for any key change, not only revocation) drops the key on
// every replica: the next verification reads Redis again.
func TestInvalidateKeyMakesEveryReplicaReadRedis(t *testing.T) {
	a, b, tenant, k := twoReplicas(t)
	ctx := context.Background()
	if _, err := b.svc.VerifyAPIKey(ctx, k.GetSecret()); err != nil {
		t.Fatal(err)
	}
	// Remove the record behind the services' backs: only a Redis read sees it.
	a.rdb.Del(ctx, keys.Tenant(tenant).APIKey(localKeyID(k.GetApiKey().GetKeyId())))
	if _, err := b.svc.VerifyAPIKey(ctx, k.GetSecret()); err != nil {
		t.Fatalf("before the invalidation b answers from its cache: %v", err)
	}
	if err := a.svc.InvalidateKey(ctx, tenant, localKeyID(k.GetApiKey().GetKeyId())); err != nil {
		t.Fatal(err)
	}
	if !refusedSoon(t, func() error { return errtest.ErrOf(b.svc.VerifyAPIKey(ctx, k.GetSecret())) }) {
		t.Fatal("replica b did not drop the invalidated key")
	}
}

// A replica whose subscription broke may have missed invalidations: when it
// resubscribes it drops its whole cache.
func TestInvalidationSubscriptionReconnectsAndDropsTheCache(t *testing.T) {
	b := newEnv(t, func(o *Options) { o.KeyCacheTTL = time.Hour })
	b.watching(t)
	ctx := context.Background()
	tenant := b.createTenant()
	k := b.createKey(tenant)
	if _, err := b.svc.VerifyAPIKey(ctx, k.GetSecret()); err != nil {
		t.Fatal(err)
	}
	// The key goes away unannounced (as if its invalidation were lost) and
	// the subscription's connection is killed.
	b.rdb.Del(ctx, keys.Tenant(tenant).APIKey(localKeyID(k.GetApiKey().GetKeyId())))
	// (On a Cluster the subscription lives on one node: kill on every one.)
	kill := func(ctx context.Context, c *redis.Client) error {
		return c.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err()
	}
	var err error
	if cc, ok := b.rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachShard(ctx, kill)
	} else {
		err = b.rdb.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err()
	}
	if err != nil {
		t.Fatal(err)
	}
	if !refusedSoon(t, func() error { return errtest.ErrOf(b.svc.VerifyAPIKey(ctx, k.GetSecret())) }) {
		t.Fatal("after resubscribing the replica still trusts its old cache")
	}
	// And it is subscribed again.
	b.watchingAgain(t)
}

// watchingAgain waits until the subscription is live again.
func (e *env) watchingAgain(t *testing.T) {
	t.Helper()
	for i := 0; i < 500; i++ {
		if e.rdb.PubSubNumSub(context.Background(), keys.KeyInvalidations).Val()[keys.KeyInvalidations] > 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the subscription did not come back")
}
