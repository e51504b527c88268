package admin

import (
	"container/list"
	"sync"
	"time"

	"github.com/cyclesgo/cycles-go/pkg/auth"
)

// keyCache remembers positive API-key verifications for a short TTL so the
// auth hot path does not pay a Redis round trip per RPC. It is bounded (LRU
// eviction when full) and keyed by (tenant, key id); the entry keeps the hash
// of the verified key, and a lookup re-compares the presented key's hash with
// it in constant time, so a wrong secret for a cached key id is never a hit.
//
// Only successes are cached: unknown, revoked or malformed keys always go to
// Redis (and are refused there), so a key created a moment ago is usable at
// once. RevokeApiKey drops the local entry; other replicas keep accepting a
// revoked key until their entry expires, i.e. for at most the TTL (default 5 s).
type keyCache struct {
	ttl  time.Duration
	size int
	now  func() time.Time

	mu    sync.Mutex
	ll    *list.List // front = most recently used
	items map[string]*list.Element
}

type keyEntry struct {
	id      string
	hash    string
	p       auth.Principal
	expires time.Time
}

func newKeyCache(ttl time.Duration, size int, now func() time.Time) *keyCache {
	return &keyCache{ttl: ttl, size: size, now: now, ll: list.New(), items: make(map[string]*list.Element)}
}

func cacheID(tenant, keyID string) string { return tenant + "/" + keyID }

func (c *keyCache) enabled() bool { return c != nil && c.ttl > 0 && c.size > 0 }

// get returns the principal of a cached, unexpired entry whose stored hash
// equals hash.
func (c *keyCache) get(tenant, keyID, hash string) (auth.Principal, bool) {
	if !c.enabled() {
		return auth.Principal{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[cacheID(tenant, keyID)]
	if !ok {
		return auth.Principal{}, false
	}
	e := el.Value.(*keyEntry)
	if !c.now().Before(e.expires) {
		c.ll.Remove(el)
		delete(c.items, e.id)
		return auth.Principal{}, false
	}
	if !auth.EqualHash(e.hash, hash) {
		return auth.Principal{}, false
	}
	c.ll.MoveToFront(el)
	return e.p, true
}

// put caches a successful verification, evicting the least recently used
// entry when full.
func (c *keyCache) put(tenant, keyID, hash string, p auth.Principal) {
	if !c.enabled() {
		return
	}
	id := cacheID(tenant, keyID)
	c.mu.Lock()
	defer c.mu.Unlock()
	exp := c.now().Add(c.ttl)
	if el, ok := c.items[id]; ok {
		e := el.Value.(*keyEntry)
		e.hash, e.p, e.expires = hash, p, exp
		c.ll.MoveToFront(el)
		return
	}
	for c.ll.Len() >= c.size {
		oldest := c.ll.Back()
		c.ll.Remove(oldest)
		delete(c.items, oldest.Value.(*keyEntry).id)
	}
	c.items[id] = c.ll.PushFront(&keyEntry{id: id, hash: hash, p: p, expires: exp})
}

// drop forgets one key (called on revocation).
func (c *keyCache) drop(tenant, keyID string) {
	if !c.enabled() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[cacheID(tenant, keyID)]; ok {
		c.ll.Remove(el)
		delete(c.items, cacheID(tenant, keyID))
	}
}

// len is the number of entries (tests).
func (c *keyCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ll.Len()
}
