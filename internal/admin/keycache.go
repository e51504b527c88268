package admin

import (
	"container/list"
	"sync"
	"time"

	"github.com/cyclesgo/cycles-go/internal/auth"
)

// keyCache remembers API-key verifications for a short time so the auth hot
// path does not pay a Redis round trip per RPC.
//
// Positive entries (ttl) are keyed by (tenant, key id); the entry keeps the
// hash of the verified key, and a lookup re-compares the presented key's hash
// with it in constant time, so a wrong secret for a cached key id is never a
// hit. Negative entries (negTTL, brief) are keyed by the hash of the whole
// presented key: a client retrying a revoked, unknown or wrong key costs no
// Redis call each time. (A guessing loop that varies the key is bounded by
// the per-peer failed-auth throttle in internal/server instead.) Both are bounded
// LRUs.
//
// Revocation is immediate on this replica: RevokeApiKey drops the entry AND
// bumps gen. A verification snapshots gen before it reads Redis and stores
// its result only if gen is unchanged, so a verification that read the key
// as ACTIVE before the revoke cannot repopulate the cache after it (the race
// of docs/limits.md). Other replicas hear of it on the KeyInvalidations
// pub/sub channel (invalidate.go) and drop it within milliseconds; a replica
// whose subscription broke drops its whole cache when it resubscribes, and
// the ttl (default 5 s) stays the bound if a message is lost anyway. CreateApiKey bumps gen
// and drops a negative entry for the new key, so a new key is usable at once
// here; elsewhere a key presented before it existed can stay refused for up
// to negTTL.
type keyCache struct {
	ttl    time.Duration
	negTTL time.Duration
	now    func() time.Time

	mu  sync.Mutex
	gen uint64
	pos lru[keyEntry]
	neg lru[struct{}]
}

type keyEntry struct {
	hash string
	p    auth.Principal
}

func newKeyCache(ttl time.Duration, size int, now func() time.Time) *keyCache {
	return &keyCache{ttl: ttl, now: now, pos: newLRU[keyEntry](size), neg: newLRU[struct{}](size)}
}

// withNegative enables caching of refusals for negTTL.
func (c *keyCache) withNegative(negTTL time.Duration) *keyCache {
	c.negTTL = negTTL
	return c
}

func cacheID(tenant, keyID string) string { return tenant + "/" + keyID }

func (c *keyCache) enabled() bool    { return c != nil && c.ttl > 0 && c.pos.size > 0 }
func (c *keyCache) negEnabled() bool { return c != nil && c.negTTL > 0 && c.neg.size > 0 }

// generation is the snapshot a verification takes before it reads Redis.
func (c *keyCache) generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// get returns the principal of a cached, unexpired entry whose stored hash
// equals hash.
func (c *keyCache) get(tenant, keyID, hash string) (auth.Principal, bool) {
	if !c.enabled() {
		return auth.Principal{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.pos.get(cacheID(tenant, keyID), c.now())
	if !ok || !auth.EqualHash(e.hash, hash) {
		return auth.Principal{}, false
	}
	return e.p, true
}

// refused reports whether the presented key (by hash) was refused moments ago.
func (c *keyCache) refused(hash string) bool {
	if !c.negEnabled() {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.neg.get(hash, c.now())
	return ok
}

// put caches a successful verification made under generation gen; it is
// dropped if a revocation (or creation) happened since gen was taken. A
// positive until (the time the key has left before it expires) shortens the
// entry's life, so a cached key is refused from the moment it expires.
func (c *keyCache) put(gen uint64, tenant, keyID, hash string, p auth.Principal, until time.Duration) {
	if !c.enabled() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen {
		return
	}
	life := c.ttl
	if until > 0 && until < life {
		life = until
	}
	c.pos.put(cacheID(tenant, keyID), keyEntry{hash: hash, p: p}, c.now().Add(life))
}

// putRefused caches a refusal of the presented key (by hash) made under gen.
func (c *keyCache) putRefused(gen uint64, hash string) {
	if !c.negEnabled() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen {
		return
	}
	c.neg.put(hash, struct{}{}, c.now().Add(c.negTTL))
}

// drop forgets one key and invalidates every verification in flight (called
// on revocation, before and after the script).
func (c *keyCache) drop(tenant, keyID string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.pos.remove(cacheID(tenant, keyID))
}

// dropAll forgets every positive entry and invalidates every verification
// in flight: the replica may have missed invalidations (its subscription
// was down), so nothing it verified before can be trusted.
func (c *keyCache) dropAll() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	for c.pos.ll.Len() > 0 {
		c.pos.remove(c.pos.ll.Back().Value.(*lruEntry[keyEntry]).key)
	}
}

// created forgets a refusal of a key that now exists and invalidates
// verifications in flight (which may have read "unknown").
func (c *keyCache) created(hash string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.neg.remove(hash)
}

// len is the number of positive entries (tests).
func (c *keyCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pos.ll.Len()
}

// lru is a size-bounded map with per-entry expiry (not safe for concurrent
// use; keyCache holds its lock).
type lru[V any] struct {
	size  int
	ll    *list.List // front = most recently used
	items map[string]*list.Element
}

type lruEntry[V any] struct {
	key     string
	val     V
	expires time.Time
}

func newLRU[V any](size int) lru[V] {
	return lru[V]{size: size, ll: list.New(), items: make(map[string]*list.Element)}
}

func (l *lru[V]) get(key string, now time.Time) (V, bool) {
	var zero V
	el, ok := l.items[key]
	if !ok {
		return zero, false
	}
	e := el.Value.(*lruEntry[V])
	if !now.Before(e.expires) {
		l.ll.Remove(el)
		delete(l.items, key)
		return zero, false
	}
	l.ll.MoveToFront(el)
	return e.val, true
}

func (l *lru[V]) put(key string, val V, expires time.Time) {
	if el, ok := l.items[key]; ok {
		e := el.Value.(*lruEntry[V])
		e.val, e.expires = val, expires
		l.ll.MoveToFront(el)
		return
	}
	for l.ll.Len() >= l.size {
		oldest := l.ll.Back()
		l.ll.Remove(oldest)
		delete(l.items, oldest.Value.(*lruEntry[V]).key)
	}
	l.items[key] = l.ll.PushFront(&lruEntry[V]{key: key, val: val, expires: expires})
}

func (l *lru[V]) remove(key string) {
	if el, ok := l.items[key]; ok {
		l.ll.Remove(el)
		delete(l.items, key)
	}
}
