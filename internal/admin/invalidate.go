package admin

import (
	"context"
	"strings"

	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/script"
)

// InvalidateKey drops tenant's API key keyID from the verified-key cache of
// this replica and, through the KeyInvalidations pub/sub channel, of every
// replica running WatchKeyInvalidations, so the next call with that key is
// verified against Redis again. Call it after any change to a key that must
// take effect at once everywhere: a revocation, a permission change, a key
// update. The publish is best effort: on error the other replicas still
// forget the key within the cache TTL (-key-cache-ttl), and the error is
// returned (counted in cycles.auth.invalidation_failures) for the caller to
// report.
func (s *Service) InvalidateKey(ctx context.Context, tenant, keyID string) error {
	s.keys.drop(tenant, keyID)
	if err := s.exec.Publish(ctx, keys.KeyInvalidations, cacheID(tenant, keyID)); err != nil {
		s.m.invalidationFailures.Add(ctx, 1)
		return err
	}
	return nil
}

// WatchKeyInvalidations applies every replica's InvalidateKey to this
// replica's cache until ctx ends. It listens on a Redis connection of its own
// and reconnects after any failure; after each (re)subscription it drops the
// whole cache, since invalidations sent while it was away are lost. Run it
// for the life of the process (cyclesd does, as a worker).
func (s *Service) WatchKeyInvalidations(ctx context.Context) error {
	return s.exec.Listen(ctx, keys.KeyInvalidations, script.Listener{
		Message: func(payload string) {
			if i := strings.LastIndexByte(payload, '/'); i > 0 {
				s.keys.drop(payload[:i], payload[i+1:])
				s.m.invalidationsHeard.Add(ctx, 1)
			}
		},
		Gap: func() {
			s.keys.dropAll()
		},
	})
}
