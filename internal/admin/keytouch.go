package admin

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/script"
)

// KeyTouchInterval is how often at most a key's last_used_at is written.
const KeyTouchInterval = time.Minute

// keyTouches records API-key use off the request path: an authentication
// notes the key here (a map lookup, no I/O), at most once per key per
// KeyTouchInterval per replica, and RunKeyTouches writes last_used_at in the
// background; the touch script itself skips a key written less than a
// minute ago by any replica. A full queue drops the touch: last_used_at is
// coarse by design and never worth slowing a call for.
type keyTouches struct {
	now   func() time.Time
	queue chan string // cacheID(tenant, keyID)

	mu   sync.Mutex
	last map[string]time.Time
	size int
}

func newKeyTouches(size int, now func() time.Time) *keyTouches {
	return &keyTouches{now: now, queue: make(chan string, 256), last: make(map[string]time.Time), size: size}
}

// note queues a touch of the key unless this replica queued one within the
// interval.
func (t *keyTouches) note(tenant, keyID string) {
	id := cacheID(tenant, keyID)
	now := t.now()
	t.mu.Lock()
	if at, ok := t.last[id]; ok && now.Sub(at) < KeyTouchInterval {
		t.mu.Unlock()
		return
	}
	if len(t.last) >= t.size {
		clear(t.last) // bounded; forgetting only costs a touch the script skips
	}
	t.last[id] = now
	t.mu.Unlock()
	select {
	case t.queue <- id:
	default:
	}
}

// RunKeyTouches writes the queued last_used_at touches until ctx ends. Run it
// for the life of the process (cyclesd does, as a worker); without it keys
// simply report no last_used_at. A failed write is dropped.
func (s *Service) RunKeyTouches(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case id := <-s.touches.queue:
			i := strings.LastIndexByte(id, '/')
			if i <= 0 {
				continue
			}
			var wrote bool
			_ = scriptTouchAPIKey.RunInto(ctx, s.exec, &wrote, apiKeyKeys{keys.Tenant(id[:i]).APIKey(id[i+1:])}, script.None{})
		}
	}
}
