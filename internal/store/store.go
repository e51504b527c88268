// Package store opens the Redis deployment cyclesd runs on (single node,
// Sentinel or Cluster through one go-redis UniversalClient, or the embedded
// in-process store of dev mode) and checks it is safe for a ledger.
// Commands themselves are sent only by internal/script.
package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/cyclesgo/cycles-go/internal/config"
	"github.com/cyclesgo/cycles-go/internal/store/redisinfo"
	"github.com/cyclesgo/cycles-go/internal/tlsconfig"
)

// Store is an open connection to the budget store.
type Store struct {
	Client redis.UniversalClient
	// Streams is a second, smaller client for stream work (event watches and
	// their tail pollers): long-lived streams and bursts of stream opens wait
	// for its connections, never for the pool unary RPCs use.
	Streams redis.UniversalClient
	// Embedded is non-nil in dev mode.
	Embedded *miniredis.Miniredis
}

// Open connects according to cfg; with no address it starts the embedded store.
func Open(cfg *config.Config) (*Store, error) {
	if cfg.Dev() {
		m := miniredis.NewMiniRedis()
		if err := m.Start(); err != nil {
			return nil, fmt.Errorf("start embedded store: %w", err)
		}
		return &Store{
			Client:   redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true}),
			Streams:  redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true, PoolSize: cfg.StreamRedisPoolSize}),
			Embedded: m,
		}, nil
	}
	opts := &redis.UniversalOptions{
		Addrs:         cfg.RedisAddrs,
		Username:      cfg.RedisUsername,
		Password:      cfg.RedisPassword,
		DB:            cfg.RedisDB,
		MasterName:    cfg.RedisMasterName,
		IsClusterMode: cfg.RedisCluster,
		PoolSize:      cfg.RedisPoolSize,
		DialTimeout:   cfg.RedisDialTimeout,
		ReadTimeout:   cfg.RedisReadTimeout,
		WriteTimeout:  cfg.RedisWriteTimeout,
		// Fail fast and never re-send transparently: a script whose reply timed out may have run,
		// and re-sending it would count a rate-limit hit or a sweep twice.
		// Callers fail closed (UNAVAILABLE) and clients retry with their
		// idempotency key.
		MaxRetries: -1,
		// Honour each RPC's deadline on the socket, so a slow Redis fails the
		// RPC fast (UNAVAILABLE) instead of holding it.
		ContextTimeoutEnabled: true,
	}
	if cfg.RedisTLS {
		tc, err := tlsconfig.Client(cfg.RedisTLSCA, cfg.RedisTLSInsecure)
		if err != nil {
			return nil, fmt.Errorf("redis TLS: %w", err)
		}
		opts.TLSConfig = tc
	}
	streams := *opts
	streams.PoolSize = cfg.StreamRedisPoolSize
	return &Store{Client: redis.NewUniversalClient(opts), Streams: redis.NewUniversalClient(&streams)}, nil
}

// Close closes the client and the embedded store.
func (s *Store) Close() error {
	err := s.Client.Close()
	if s.Streams != nil {
		_ = s.Streams.Close()
	}
	if s.Embedded != nil {
		s.Embedded.Close()
	}
	return err
}

// Ping reports whether Redis answers (on Cluster: every master).
func (s *Store) Ping(ctx context.Context) error {
	return redisinfo.ForEachMaster(ctx, s.Client, func(ctx context.Context, c redis.Cmdable) error { return c.Ping(ctx).Err() })
}

// ErrEvictionPolicy is returned when Redis may evict ledger keys.
type ErrEvictionPolicy struct{ Policy string }

func (e *ErrEvictionPolicy) Error() string {
	return fmt.Sprintf("redis maxmemory-policy is %q: eviction would silently delete budgets, reservations and limiter keys; "+
		"set maxmemory-policy to noeviction (or volatile-* if you must), or start with -allow-eviction-policy to accept the risk", e.Policy)
}

// CheckEvictionPolicy refuses an allkeys-* maxmemory-policy (on every master).
// The embedded store has no eviction and is not checked.
func (s *Store) CheckEvictionPolicy(ctx context.Context) error {
	if s.Embedded != nil {
		return nil
	}
	check := func(ctx context.Context, c redis.Cmdable) error {
		res, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
		if err != nil {
			// Managed Redis may forbid CONFIG; fall back to INFO memory.
			info, ierr := c.Info(ctx, "memory").Result()
			if ierr != nil {
				return fmt.Errorf("read maxmemory-policy: %w", err)
			}
			res = map[string]string{"maxmemory-policy": redisinfo.Field(info, "maxmemory_policy")}
		}
		if p := res["maxmemory-policy"]; strings.HasPrefix(p, "allkeys-") {
			return &ErrEvictionPolicy{Policy: p}
		}
		return nil
	}
	return redisinfo.ForEachMaster(ctx, s.Client, check)
}

// ErrFull is the health probe's answer while Redis is at maxmemory.
var ErrFull = errors.New("budget store is full: Redis used_memory reached maxmemory (noeviction). " +
	"New reservations are refused with RESOURCE_EXHAUSTED/STORE_FULL; commit, release, expiry and key revocation keep working (Redis 7). " +
	"Raise maxmemory, add memory or shards, or shorten -event-retention; health recovers by itself")

// Full reports whether Redis (any master) has reached its maxmemory, where a
// noeviction Redis refuses writes. The embedded store has no maxmemory.
func (s *Store) Full(ctx context.Context) (bool, error) {
	if s.Embedded != nil {
		return false, nil
	}
	var full atomic.Bool
	err := redisinfo.ForEachMaster(ctx, s.Client, func(ctx context.Context, c redis.Cmdable) error {
		info, err := c.Info(ctx, "memory").Result()
		if err != nil {
			return err
		}
		used, _ := strconv.ParseInt(redisinfo.Field(info, "used_memory"), 10, 64)
		max, _ := strconv.ParseInt(redisinfo.Field(info, "maxmemory"), 10, 64)
		if max > 0 && used >= max {
			full.Store(true)
		}
		return nil
	})
	return full.Load(), err
}

// Probe is the health probe: nil while Redis answers and has room; ErrFull
// while it is at maxmemory. On Redis it is one INFO memory per master (an
// answer is the reachability check too); the embedded store gets a PING.
func (s *Store) Probe(ctx context.Context) error {
	if s.Embedded != nil {
		return s.Ping(ctx)
	}
	full, err := s.Full(ctx)
	if err != nil {
		return err
	}
	if full {
		return ErrFull
	}
	return nil
}

// ScriptFlags reports whether every master runs Redis 7 or later, which
// accepts script flag lines ("#!lua flags=allow-oom"); the embedded store
// and Redis 6 do not.
func (s *Store) ScriptFlags(ctx context.Context) (bool, error) {
	if s.Embedded != nil {
		return false, nil
	}
	return redisinfo.Redis7(ctx, s.Client)
}
