package admin

import (
	"context"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc/codes"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/permission"
	"github.com/cyclesgo/cycles-go/test/redistest"
)

// fakeClock is a settable clock for the key cache.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// withClock swaps the key cache's clock (white-box: time is not a service option).
func (e *env) withClock() *fakeClock {
	c := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	e.svc.keys.now = c.now
	return c
}

func (e *env) createKey(tenant string) *cyclesv1.CreateApiKeyResponse {
	e.t.Helper()
	return mustCall(e.t, e.ctx, &cyclesv1.CreateApiKeyRequest{TenantId: tenant, Name: "ci"}, e.svc.CreateApiKey)
}

func TestCreateApiKeyStoresOnlyTheHash(t *testing.T) {
	e := newEnv(t)
	id := e.createTenant()
	resp := e.createKey(id)
	k := resp.GetApiKey()
	pk, ok := auth.ParseAPIKey(resp.GetSecret())
	if !ok || pk.Tenant != id || pk.KeyID != localKeyID(k.GetKeyId()) {
		t.Fatalf("secret %q does not parse to the key (%v)", resp.GetSecret(), k)
	}
	if k.GetTenantId() != id || k.GetName() != "ci" || k.GetStatus() != cyclesv1.ApiKeyStatus_API_KEY_STATUS_ACTIVE || k.GetCreatedAtMs() == 0 || k.RevokedAtMs != nil {
		t.Fatalf("key = %v", k)
	}
	ctx := context.Background()
	rec := e.rdb.HGetAll(ctx, keys.Tenant(id).APIKey(localKeyID(k.GetKeyId()))).Val()
	if rec["hash"] != auth.HashSecret(resp.GetSecret()) || rec["status"] != "ACTIVE" || rec["tenant_id"] != id {
		t.Fatalf("record = %v", rec)
	}
	// The secret itself is stored nowhere.
	for key, val := range e.snapshot(id) {
		if strings.Contains(val, pk.Secret) {
			t.Fatalf("key %s contains the secret", key)
		}
	}
	if ids := e.rdb.ZRange(ctx, keys.Tenant(id).APIKeys(), 0, -1).Val(); !reflect.DeepEqual(ids, []string{localKeyID(k.GetKeyId())}) {
		t.Fatalf("key index = %v", ids)
	}
	evs := e.events(id)
	last := evs[len(evs)-1]
	if last.Type != "api_key.created" || last.Category != "api_key" || last.Data["key_id"] != k.GetKeyId() || last.Data["new_status"] != "ACTIVE" {
		t.Fatalf("event = %+v", last)
	}
	p, err := e.svc.VerifyAPIKey(ctx, resp.GetSecret())
	if err != nil || !reflect.DeepEqual(p, auth.Principal{Tenant: id, KeyID: localKeyID(k.GetKeyId()), Permissions: permission.Default}) {
		t.Fatalf("verify = %+v, %v", p, err)
	}
	if n := e.metrics.Sum(t, "cycles.admin.api_keys.created"); n != 1 {
		t.Fatalf("api_keys.created = %d", n)
	}
}

func TestCreateApiKeyRefusals(t *testing.T) {
	e := newEnv(t)
	closed := e.createTenant()
	mustCall(t, e.ctx, &cyclesv1.CloseTenantRequest{TenantId: closed}, e.svc.CloseTenant)
	suspended := e.createTenant()
	mustCall(t, e.ctx, &cyclesv1.UpdateTenantRequest{TenantId: suspended, Status: cyclesv1.TenantStatus_TENANT_STATUS_SUSPENDED}, e.svc.UpdateTenant)
	cases := []refusal[*cyclesv1.CreateApiKeyRequest]{
		{"no tenant id", &cyclesv1.CreateApiKeyRequest{}, codes.InvalidArgument, apierr.InvalidRequest},
		{"bad tenant id", &cyclesv1.CreateApiKeyRequest{TenantId: "A_B"}, codes.InvalidArgument, apierr.InvalidRequest},
		{"name too long", &cyclesv1.CreateApiKeyRequest{TenantId: suspended, Name: strings.Repeat("n", 257)}, codes.InvalidArgument, apierr.InvalidRequest},
		{"unknown tenant", &cyclesv1.CreateApiKeyRequest{TenantId: newTenantID(t)}, codes.NotFound, apierr.TenantNotFound},
		{"closed tenant", &cyclesv1.CreateApiKeyRequest{TenantId: closed}, codes.FailedPrecondition, apierr.TenantClosed},
	}
	refuseEach(e, t, cases, e.svc.CreateApiKey)
	// A suspended tenant can still get keys (it keeps read access).
	e.createKey(suspended)
}

func TestRevokeApiKeyIsIdempotentAndBlocksAtOnce(t *testing.T) {
	e := newEnv(t)
	id := e.createTenant()
	created := e.createKey(id)
	keyID := created.GetApiKey().GetKeyId()
	ctx := context.Background()
	if _, err := e.svc.VerifyAPIKey(ctx, created.GetSecret()); err != nil {
		t.Fatal(err) // now cached
	}

	k := mustCall(t, e.ctx, &cyclesv1.RevokeApiKeyRequest{TenantId: id, KeyId: keyID}, e.svc.RevokeApiKey).GetApiKey()
	if k.GetStatus() != cyclesv1.ApiKeyStatus_API_KEY_STATUS_REVOKED || k.RevokedAtMs == nil || k.GetRevokedAtMs() < k.GetCreatedAtMs() {
		t.Fatalf("revoked key = %v", k)
	}
	// The local cache entry is gone: the very next verification is refused.
	_, err := e.svc.VerifyAPIKey(ctx, created.GetSecret())
	wantRefused(t, err, codes.Unauthenticated, apierr.Unauthorized)

	snap := e.snapshot(id)
	again := mustCall(t, e.ctx, &cyclesv1.RevokeApiKeyRequest{TenantId: id, KeyId: keyID}, e.svc.RevokeApiKey).GetApiKey()
	if again.GetStatus() != cyclesv1.ApiKeyStatus_API_KEY_STATUS_REVOKED || again.GetRevokedAtMs() != k.GetRevokedAtMs() {
		t.Fatalf("second revoke = %v", again)
	}
	e.unchanged(id, snap)
	var revoked int
	for _, ev := range e.events(id) {
		if ev.Type == "api_key.revoked" {
			revoked++
			if ev.Category != "api_key" || ev.Data["key_id"] != keyID || ev.Data["new_status"] != "REVOKED" || ev.Data["previous_status"] != "ACTIVE" {
				t.Fatalf("event = %+v", ev)
			}
		}
	}
	if revoked != 1 {
		t.Fatalf("%d api_key.revoked events, want 1", revoked)
	}
	if n := e.metrics.Sum(t, "cycles.admin.api_keys.revoked"); n != 1 {
		t.Fatalf("api_keys.revoked = %d", n)
	}

	for _, tc := range []struct {
		name   string
		req    *cyclesv1.RevokeApiKeyRequest
		code   codes.Code
		reason apierr.Code
	}{
		{"unknown key", &cyclesv1.RevokeApiKeyRequest{TenantId: id, KeyId: "0123456789abcdef"}, codes.NotFound, apierr.KeyNotFound},
		{"key of another tenant", &cyclesv1.RevokeApiKeyRequest{TenantId: e.createTenant(), KeyId: keyID}, codes.NotFound, apierr.KeyNotFound},
		{"key id not hex", &cyclesv1.RevokeApiKeyRequest{TenantId: id, KeyId: "0123456789abcdeg"}, codes.InvalidArgument, apierr.InvalidRequest},
		{"key id short", &cyclesv1.RevokeApiKeyRequest{TenantId: id, KeyId: "0123"}, codes.InvalidArgument, apierr.InvalidRequest},
		{"no key id", &cyclesv1.RevokeApiKeyRequest{TenantId: id}, codes.InvalidArgument, apierr.InvalidRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			refusedUnchanged(e, t, tc.req.GetTenantId(), tc.req, e.svc.RevokeApiKey, tc.code, tc.reason)
		})
	}
}

func TestVerifyAPIKeyRefusals(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	id := e.createTenant()
	good := e.createKey(id)
	pk, _ := auth.ParseAPIKey(good.GetSecret())
	revoked := e.createKey(id)
	mustCall(t, e.ctx, &cyclesv1.RevokeApiKeyRequest{TenantId: id, KeyId: revoked.GetApiKey().GetKeyId()}, e.svc.RevokeApiKey)
	orphanTenant := e.createTenant()
	orphan := e.createKey(orphanTenant)
	e.rdb.Del(ctx, keys.Tenant(orphanTenant).Record())

	wrongSecret := "cyc_" + id + "_" + pk.KeyID + "_" + strings.Repeat("0", 64)
	cases := []struct {
		name, key, reason string
	}{
		{"empty", "", authMalformed},
		{"garbage", "hello", authMalformed},
		{"uppercase secret", strings.ToUpper(good.GetSecret()), authMalformed},
		{"unknown key id", "cyc_" + id + "_" + "0000000000000000_" + strings.Repeat("a", 64), authUnknownKey},
		{"unknown tenant", "cyc_" + newTenantID(t) + "_" + pk.KeyID + "_" + pk.Secret, authUnknownKey},
		{"wrong secret", wrongSecret, authHashMismatch},
		{"revoked", revoked.GetSecret(), authRevoked},
		{"tenant record gone", orphan.GetSecret(), authTenantMissing},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := e.metrics.Sum(t, "cycles.auth.failures", attribute.String("reason", tc.reason))
			_, err := e.svc.VerifyAPIKey(ctx, tc.key)
			ae := wantRefused(t, err, codes.Unauthenticated, apierr.Unauthorized)
			if ae.Message != "invalid API key" {
				t.Fatalf("message %q reveals why", ae.Message)
			}
			if after := e.metrics.Sum(t, "cycles.auth.failures", attribute.String("reason", tc.reason)); after != before+1 {
				t.Fatalf("auth.failures{%s} moved %d -> %d", tc.reason, before, after)
			}
		})
	}
	// A wrong secret is never a positive hit, even after the good key was cached.
	if _, err := e.svc.VerifyAPIKey(ctx, good.GetSecret()); err != nil {
		t.Fatal(err)
	}
	hits := e.metrics.Sum(t, "cycles.auth.cache_hits")
	_, err := e.svc.VerifyAPIKey(ctx, wrongSecret)
	wantRefused(t, err, codes.Unauthenticated, apierr.Unauthorized)
	if e.metrics.Sum(t, "cycles.auth.cache_hits") != hits {
		t.Fatal("a wrong secret for a cached key id was a cache hit")
	}
}

func TestVerifyAPIKeySuspendedAndClosedTenantsStillAuthenticate(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.KeyCacheTTL = -1 }) // always read Redis
	ctx := context.Background()
	susp := e.createTenant()
	sk := e.createKey(susp)
	mustCall(t, e.ctx, &cyclesv1.UpdateTenantRequest{TenantId: susp, Status: cyclesv1.TenantStatus_TENANT_STATUS_SUSPENDED}, e.svc.UpdateTenant)
	closed := e.createTenant()
	ck := e.createKey(closed)
	mustCall(t, e.ctx, &cyclesv1.CloseTenantRequest{TenantId: closed}, e.svc.CloseTenant)
	for _, k := range []*cyclesv1.CreateApiKeyResponse{sk, ck} {
		p, err := e.svc.VerifyAPIKey(ctx, k.GetSecret())
		if err != nil || p.Tenant != k.GetApiKey().GetTenantId() || p.KeyID != localKeyID(k.GetApiKey().GetKeyId()) || p.Admin {
			t.Fatalf("verify = %+v, %v", p, err)
		}
	}
	if n := e.metrics.Sum(t, "cycles.auth.cache_hits"); n != 0 {
		t.Fatalf("cache disabled but %d hits", n)
	}
}

func TestVerifyAPIKeyCache(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.KeyCacheTTL = 5 * time.Second })
	clock := e.withClock()
	ctx := context.Background()
	id := e.createTenant()
	k := e.createKey(id)
	keyID := k.GetApiKey().GetKeyId()

	if _, err := e.svc.VerifyAPIKey(ctx, k.GetSecret()); err != nil {
		t.Fatal(err)
	}
	if e.metrics.Sum(t, "cycles.auth.cache_misses") != 1 || e.metrics.Sum(t, "cycles.auth.cache_hits") != 0 {
		t.Fatal("first verification must read Redis")
	}
	// Remove the record behind the service's back: a hit proves no Redis read.
	e.rdb.Del(ctx, keys.Tenant(id).APIKey(localKeyID(keyID)))
	clock.advance(4 * time.Second)
	if _, err := e.svc.VerifyAPIKey(ctx, k.GetSecret()); err != nil {
		t.Fatalf("within the TTL the cache answers: %v", err)
	}
	if n := e.metrics.Sum(t, "cycles.auth.cache_hits"); n != 1 {
		t.Fatalf("cache_hits = %d", n)
	}
	// After the TTL the store is asked again (and the key is gone).
	clock.advance(2 * time.Second)
	_, err := e.svc.VerifyAPIKey(ctx, k.GetSecret())
	wantRefused(t, err, codes.Unauthenticated, apierr.Unauthorized)
	if n := e.metrics.Sum(t, "cycles.auth.cache_misses"); n != 2 {
		t.Fatalf("cache_misses = %d", n)
	}
}

func TestKeyCacheEvictsLeastRecentlyUsed(t *testing.T) {
	clock := &fakeClock{t: time.Unix(0, 0)}
	c := newKeyCache(time.Minute, 2, clock.now)
	p := func(id string) auth.Principal { return auth.Principal{Tenant: "t", KeyID: id} }
	c.put(0, "t", "a", "ha", p("a"), 0)
	c.put(0, "t", "b", "hb", p("b"), 0)
	if _, ok := c.get("t", "a", "ha"); !ok { // a is now most recent
		t.Fatal("a missing")
	}
	c.put(0, "t", "c", "hc", p("c"), 0) // evicts b
	if c.len() != 2 {
		t.Fatalf("len = %d", c.len())
	}
	if _, ok := c.get("t", "b", "hb"); ok {
		t.Fatal("b should have been evicted")
	}
	for _, id := range []string{"a", "c"} {
		if got, ok := c.get("t", id, "h"+id); !ok || !reflect.DeepEqual(got, p(id)) {
			t.Fatalf("%s: %v %v", id, got, ok)
		}
	}
	if _, ok := c.get("t", "a", "wrong"); ok {
		t.Fatal("hash mismatch must miss")
	}
	c.drop("t", "a")
	if _, ok := c.get("t", "a", "ha"); ok {
		t.Fatal("dropped entry still served")
	}
	clock.advance(time.Minute)
	if _, ok := c.get("t", "c", "hc"); ok {
		t.Fatal("expired entry still served")
	}
	if c.len() != 0 {
		t.Fatalf("expired entry kept: len %d", c.len())
	}
}

func TestVerifyAPIKeyFailsClosedWhenRedisIsDown(t *testing.T) {
	srv := redistest.Start(t)
	e := newEnvOn(t, srv.Client(t))
	id := e.createTenant()
	k := e.createKey(id)
	e.svc.keys.drop(id, localKeyID(k.GetApiKey().GetKeyId()))
	srv.Kill()
	_, err := e.svc.VerifyAPIKey(context.Background(), k.GetSecret())
	if !apierr.HasCode(err, apierr.Unavailable) {
		t.Fatalf("err = %v, want UNAVAILABLE (not UNAUTHORIZED)", err)
	}
}

// TestRevokeRaceNoAcceptanceAfterRevokeReturns races verifications of a key
// against its revocation on the same replica: a verification that read the
// key as ACTIVE before the revoke must not put it back into the cache after
// RevokeApiKey returned. Any verification that starts after the revoke
// returned must be refused, over many rounds.
func TestRevokeRaceNoAcceptanceAfterRevokeReturns(t *testing.T) {
	rounds := 500
	if testing.Short() {
		rounds = 100
	}
	e := newEnv(t, func(o *Options) { o.KeyCacheTTL = time.Minute })
	id := e.createTenant()
	ctx := context.Background()
	const workers = 16
	var accepted, afterChecks int
	for round := 0; round < rounds; round++ {
		k := e.createKey(id)
		var revoked atomic.Bool
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var mu sync.Mutex
		bad, checks := 0, 0
		for w := 0; w < workers; w++ {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					after := revoked.Load() // read before the call starts
					_, err := e.svc.VerifyAPIKey(ctx, k.GetSecret())
					if after {
						mu.Lock()
						checks++
						if err == nil {
							bad++
						}
						mu.Unlock()
					}
				}
			})
		}
		// Let the cold cache fill with verifications in flight, then revoke.
		time.Sleep(time.Duration(round%3) * 200 * time.Microsecond)
		mustCall(t, e.ctx, &cyclesv1.RevokeApiKeyRequest{TenantId: id, KeyId: k.GetApiKey().GetKeyId()}, e.svc.RevokeApiKey)
		revoked.Store(true)
		time.Sleep(2 * time.Millisecond)
		close(stop)
		wg.Wait()
		accepted += bad
		afterChecks += checks
	}
	t.Logf("%d rounds, %d verifications after the revoke returned, %d accepted", rounds, afterChecks, accepted)
	if afterChecks == 0 {
		t.Fatal("no verification ran after a revoke: the test proves nothing")
	}
	if accepted != 0 {
		t.Fatalf("%d verifications accepted a key after RevokeApiKey returned", accepted)
	}
}

func TestVerifyAPIKeyCachesRefusalsBriefly(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.KeyNegativeCacheTTL = 2 * time.Second })
	clock := e.withClock()
	ctx := context.Background()
	id := e.createTenant()
	unknown := "cyc_" + id + "_0000000000000000_" + strings.Repeat("b", 64)
	for i := 0; i < 5; i++ {
		_, err := e.svc.VerifyAPIKey(ctx, unknown)
		wantRefused(t, err, codes.Unauthenticated, apierr.Unauthorized)
	}
	if miss, neg := e.metrics.Sum(t, "cycles.auth.cache_misses"), e.metrics.Sum(t, "cycles.auth.negative_cache_hits"); miss != 1 || neg != 4 {
		t.Fatalf("a repeated unknown key read Redis %d times (negative hits %d), want 1 (4)", miss, neg)
	}
	// After the negative TTL Redis is asked again.
	clock.advance(2 * time.Second)
	_, err := e.svc.VerifyAPIKey(ctx, unknown)
	wantRefused(t, err, codes.Unauthenticated, apierr.Unauthorized)
	if miss := e.metrics.Sum(t, "cycles.auth.cache_misses"); miss != 2 {
		t.Fatalf("cache_misses = %d after the negative TTL, want 2", miss)
	}
	// Importing the very key that was refused makes it usable at once here.
	fixed := "cyc_" + id + "_00000000000000ab_" + strings.Repeat("c", 64)
	_, err = e.svc.VerifyAPIKey(ctx, fixed)
	wantRefused(t, err, codes.Unauthenticated, apierr.Unauthorized)
	if _, err := e.svc.ImportApiKey(e.ctx, "fixed", fixed); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.VerifyAPIKey(ctx, fixed); err != nil {
		t.Fatalf("an imported key is refused from the negative cache: %v", err)
	}
}
