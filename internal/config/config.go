// Package config is cyclesd's one settings struct: every setting is a flag and
// a CYCLESD_* environment variable (the flag wins), with a default and a
// description in one place. `cyclesd -help` prints the table.
package config

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// Config holds every setting of cyclesd.
type Config struct {
	Listen string
	// HTTPListen is the HTTP listener (Cycles HTTP/JSON wire, health); empty: off.
	HTTPListen string
	// HTTPCORSOrigins are the browser origins (comma separated) allowed to
	// call the Connect/gRPC-Web routes cross-origin; empty: none.
	HTTPCORSOrigins string
	MetricsAddr     string
	// MetricsTenantLabel labels ledger counters with the tenant.
	MetricsTenantLabel bool
	AdminKey           string
	// TLSCert and TLSKey enable TLS on the gRPC listener; TLSClientCA then
	// also requires client certificates signed by it (mTLS).
	TLSCert     string
	TLSKey      string
	TLSClientCA string
	// RedisTLSCA verifies the Redis server certificate (default: system roots).
	RedisTLSCA string

	RedisAddrs        []string
	RedisUsername     string
	RedisPassword     string
	RedisDB           int
	RedisMasterName   string
	RedisCluster      bool
	RedisTLS          bool
	RedisTLSInsecure  bool
	RedisPoolSize     int
	RedisDialTimeout  time.Duration
	RedisReadTimeout  time.Duration
	RedisWriteTimeout time.Duration
	// AllowEvictionPolicy lets cyclesd start on a Redis whose maxmemory-policy
	// evicts keys (allkeys-*), which silently deletes ledger state.
	AllowEvictionPolicy bool

	// RequestTimeout bounds every Redis-backed RPC (fail fast, fail closed).
	RequestTimeout time.Duration
	KeyCacheTTL    time.Duration
	// KeyNegativeCacheTTL is how long a refused API key is refused without
	// asking Redis.
	KeyNegativeCacheTTL time.Duration
	ShutdownGrace       time.Duration
	HealthInterval      time.Duration

	SweeperEnabled  bool
	SweeperInterval time.Duration
	SweeperBatch    int
	// SweeperBatchTime bounds the Redis time of one expire-batch call.
	SweeperBatchTime time.Duration
	// AuditInterval runs the background ledger audit of all tenants (0 = off).
	AuditInterval time.Duration

	EventRetention time.Duration
	EventHeartbeat time.Duration
	// AuditRetention is how long audit-trail entries are kept (internal/audit).
	AuditRetention time.Duration

	LogFormat string
	LogLevel  string

	// GuardPolicy is the rate-limit policy applied per API key to the runtime
	// RPCs (empty: no guard). GuardMethodPolicies adds per-method policies as
	// "/cycles.v1.RuntimeService/CreateReservation=policy,...".
	GuardPolicy         string
	GuardMethodPolicies map[string]string
	// EnvoyRLSConfig is a JSON file of Envoy descriptor rules; set, cyclesd
	// also serves envoy.service.ratelimit.v3.RateLimitService.
	EnvoyRLSConfig string
	// CustomActionKinds declares the operator's custom.* action kinds as
	// "custom.acme.erp.post=side_effect,..." (internal/actionkind.ParseCustom).
	CustomActionKinds string

	// Limits bound what any caller can make cyclesd hold (docs/limits.md).
	MaxRecvMsgBytes      int
	MaxRuntimeRecvBytes  int
	MaxConcurrentStreams int
	MaxHeaderListBytes   int
	MaxConnections       int
	// RefusedStreamsPerConn, FloodClosuresPerPeer (0: off) and
	// FloodPeerCooldown are the HEADERS-flood guard of the gRPC listener.
	RefusedStreamsPerConn int
	FloodClosuresPerPeer  int
	FloodPeerCooldown     time.Duration
	HTTPMaxConnections    int
	HTTPMaxBodyBytes      int
	HandshakeTimeout      time.Duration
	MaxConnectionIdle     time.Duration
	StreamsPerKey         int
	StreamsTotal          int
	// WatchStreamRate and WatchTenantRate pace WatchEvents reads, in events/s
	// per stream and per tenant (on one replica); negative: unlimited.
	WatchStreamRate int
	WatchTenantRate int
	// WatchFeedStreamRate and WatchFeedRate pace the all-tenant feed (admin
	// WatchEvents/ListEvents without tenant_id), in events/s per stream and
	// for every feed stream of one replica together; negative: unlimited.
	WatchFeedStreamRate      int
	WatchFeedRate            int
	WatchFeedBurst           int
	StreamRedisPoolSize      int
	AuthFailBurst            int
	AuthFailRate             float64
	UnverifiedPerFailingPeer int
	UnverifiedKeysPerPeer    int

	// ArchiveDSN is the PostgreSQL archive (internal/archive); empty: none,
	// and nothing about the ledger changes.
	ArchiveDSN string
	// ArchiveRetention is how long archived history is kept; whole day
	// partitions past it are dropped.
	ArchiveRetention time.Duration
	// HotRetention is how long a settled reservation stays in Redis once
	// the archive holds it (only with an archive).
	HotRetention time.Duration

	// DevSeed seeds a demo tenant, key and budget (dev mode does it by default).
	DevSeed bool
}

// DevAdminKey is the published admin key of dev mode; it is refused
// anywhere else.
const DevAdminKey = "dev-admin-key-change-me"

// MinAdminKeyLen is the shortest admin key accepted outside dev mode.
const MinAdminKeyLen = 32

// Dev reports whether cyclesd runs on the embedded in-process store: no Redis
// address configured. Dev mode is not durable.
func (c *Config) Dev() bool { return len(c.RedisAddrs) == 0 }

// usageHeader opens `cyclesd -help`: what it is and how to start it.
const usageHeader = `cyclesd: a budget authority for AI agents (reserve, commit, release, extend
against a tree of budgets), served over gRPC, every decision one Lua script in Redis.

Usage: cyclesd [flags]
       cyclesd version     (or -version: version, commit and build date)

  cyclesd                                     dev mode: embedded store, demo tenant, NOT durable
  cyclesd -redis-addrs 127.0.0.1:6379 -admin-key "$(openssl rand -hex 24)"

Every flag is also an environment variable (CYCLESD_ + the flag name in upper
snake case); a flag wins over its variable. Documentation: README.md and docs/.

Flags:
`

// Load parses args (without the program name) and the environment. Usage and
// parse errors are printed to stderr; -help returns flag.ErrHelp.
func Load(args []string, getenv func(string) string) (*Config, error) {
	return LoadWithOutput(args, getenv, os.Stderr)
}

// LoadWithOutput is Load printing the usage (on -help or a flag error) to out.
func LoadWithOutput(args []string, getenv func(string) string, out io.Writer) (*Config, error) {
	c := &Config{}
	fs := flag.NewFlagSet("cyclesd", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprint(out, usageHeader)
		fs.PrintDefaults()
	}
	var addrs, methodPolicies string
	define(fs, c, &addrs, &methodPolicies)

	// Environment first, so flags override it.
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		env := EnvName(f.Name)
		if v := getenv(env); v != "" {
			if err := f.Value.Set(v); err != nil && envErr == nil {
				envErr = fmt.Errorf("%s=%q: %w", env, v, err)
			}
		}
		f.Usage = fmt.Sprintf("%s (env %s)", f.Usage, env)
	})
	if envErr != nil {
		return nil, envErr
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	// cyclesd takes flags only: a stray word (a misspelt flag without its
	// dash, a subcommand that does not exist) must not start a server.
	if fs.NArg() > 0 {
		fs.Usage()
		return nil, fmt.Errorf("unexpected argument %q: cyclesd takes flags only (cyclesd -help lists them)", fs.Arg(0))
	}
	if methodPolicies != "" {
		c.GuardMethodPolicies = map[string]string{}
		for _, kv := range strings.Split(methodPolicies, ",") {
			method, policy, ok := strings.Cut(strings.TrimSpace(kv), "=")
			if !ok || !strings.HasPrefix(method, "/") || policy == "" {
				return nil, fmt.Errorf("guard-method-policies: %q is not /pkg.Service/Method=policy", kv)
			}
			c.GuardMethodPolicies[method] = policy
		}
	}
	for _, a := range strings.Split(addrs, ",") {
		if a = strings.TrimSpace(a); a != "" {
			c.RedisAddrs = append(c.RedisAddrs, a)
		}
	}
	if c.LogFormat == "" {
		c.LogFormat = "json"
		if c.Dev() {
			c.LogFormat = "console"
		}
	}
	return c, c.validate()
}

// define declares every flag of cyclesd on fs, writing into c (and into
// addrs and methodPolicies, which validate parses). The one list of
// settings: -help, the environment variables and the README's flag table
// (FlagTable) all come from it.
func define(fs *flag.FlagSet, c *Config, addrs, methodPolicies *string) {
	str := func(p *string, name, def, usage string) { fs.StringVar(p, name, def, usage) }
	dur := func(p *time.Duration, name string, def time.Duration, usage string) {
		fs.DurationVar(p, name, def, usage)
	}
	integer := func(p *int, name string, def int, usage string) { fs.IntVar(p, name, def, usage) }
	boolean := func(p *bool, name string, def bool, usage string) { fs.BoolVar(p, name, def, usage) }

	str(&c.Listen, "listen", "127.0.0.1:7700", "gRPC listen address")
	str(&c.HTTPListen, "http-listen", "127.0.0.1:7780", "HTTP listen address (health, HTTP APIs; the -tls-* flags apply too); empty: off")
	str(&c.HTTPCORSOrigins, "http-cors-origins", "", "browser origins allowed to call Connect/gRPC-Web cross-origin, comma separated (e.g. https://app.example.com); empty: none")
	str(&c.MetricsAddr, "metrics-addr", "", "HTTP address for /metrics (empty: off)")
	boolean(&c.MetricsTenantLabel, "metrics-tenant-label", true, "label ledger counters with the tenant (turn off for very many tenants)")
	str(&c.TLSCert, "tls-cert", "", "PEM certificate for the gRPC listener (enables TLS)")
	str(&c.TLSKey, "tls-key", "", "PEM private key for -tls-cert")
	str(&c.TLSClientCA, "tls-client-ca", "", "PEM CA bundle; set, clients must present a certificate it signed (mTLS)")
	str(&c.RedisTLSCA, "redis-tls-ca", "", "PEM CA bundle that signed the Redis server certificate")
	str(&c.AdminKey, "admin-key", "", "admin key (metadata x-cycles-admin-key) for AdminService, OpsService and RateLimitService admin calls; required outside dev mode; at least 32 characters (openssl rand -hex 24); dev mode defaults to the fixed, published key dev-admin-key-change-me, refused elsewhere")
	str(addrs, "redis-addrs", "", "comma-separated Redis addresses (several: a Cluster); empty runs dev mode on the embedded, non-durable store")
	str(&c.RedisUsername, "redis-username", "", "Redis ACL user")
	str(&c.RedisPassword, "redis-password", "", "Redis password")
	integer(&c.RedisDB, "redis-db", 0, "Redis database (single node and Sentinel only)")
	str(&c.RedisMasterName, "redis-master-name", "", "Sentinel master name (addresses are then sentinels)")
	boolean(&c.RedisCluster, "redis-cluster", false, "treat a single address as a Cluster seed")
	boolean(&c.RedisTLS, "redis-tls", false, "connect to Redis over TLS")
	boolean(&c.RedisTLSInsecure, "redis-tls-insecure", false, "skip Redis TLS certificate verification (testing only)")
	integer(&c.RedisPoolSize, "redis-pool-size", 0, "Redis connections per node (0: go-redis default, 10 x GOMAXPROCS)")
	dur(&c.RedisDialTimeout, "redis-dial-timeout", 500*time.Millisecond, "Redis dial timeout")
	dur(&c.RedisReadTimeout, "redis-read-timeout", 500*time.Millisecond, "Redis read timeout")
	dur(&c.RedisWriteTimeout, "redis-write-timeout", 500*time.Millisecond, "Redis write timeout")
	boolean(&c.AllowEvictionPolicy, "allow-eviction-policy", false, "start even if Redis maxmemory-policy is allkeys-* (evicts ledger keys)")
	dur(&c.RequestTimeout, "request-timeout", 750*time.Millisecond, "deadline for the Redis work of one RPC; past it the RPC fails with UNAVAILABLE")
	dur(&c.KeyCacheTTL, "key-cache-ttl", 5*time.Second, "how long a verified API key is cached (revocation reaches other replicas within this)")
	dur(&c.KeyNegativeCacheTTL, "key-negative-cache-ttl", 2*time.Second, "how long a refused API key is refused without asking Redis (negative: off)")
	dur(&c.ShutdownGrace, "shutdown-grace", 10*time.Second, "how long SIGTERM waits for in-flight RPCs")
	dur(&c.HealthInterval, "health-interval", time.Second, "how often Redis reachability is probed for gRPC health")
	boolean(&c.SweeperEnabled, "sweeper", true, "run the expiry sweeper")
	dur(&c.SweeperInterval, "sweeper-interval", 5*time.Second, "pause between sweeps that found nothing left to do")
	integer(&c.SweeperBatch, "sweeper-batch", 1000, "most reservations expired per script call")
	dur(&c.SweeperBatchTime, "sweeper-batch-time", 5*time.Millisecond, "Redis time after which one expiry script call stops taking reservations (1µs..100ms): how long a sweep may hold Redis at a time")
	dur(&c.AuditInterval, "audit-interval", 0, "pause between background ledger audits of all tenants (5 tenants/s), exported as cycles_audit_discrepancies{kind}; 0 = off")
	dur(&c.EventRetention, "event-retention", 7*24*time.Hour, "how long events stay in a tenant's stream")
	dur(&c.EventHeartbeat, "event-heartbeat", 15*time.Second, "heartbeat interval on idle WatchEvents streams")
	dur(&c.AuditRetention, "audit-retention", 400*24*time.Hour, "how long audit-trail entries (who changed what, from where) are kept")
	str(&c.LogFormat, "log-format", "", "json or console (default: console in dev mode, else json)")
	str(&c.LogLevel, "log-level", "info", "debug, info, warn, error (successful RPCs are logged at debug, refusals at info)")
	str(&c.ArchiveDSN, "archive-dsn", "", "PostgreSQL archive, e.g. postgres://cycles@db:5432/cycles (schema migrated at start; settled reservations copied there, then kept in Redis only for -hot-retention; docs/archive.md); empty: no archive, settled reservations stay in Redis for 30 days")
	dur(&c.HotRetention, "hot-retention", 24*time.Hour, "with -archive-dsn: how long a settled reservation stays in Redis once the archive holds it (its Redis TTL starts only then)")
	dur(&c.ArchiveRetention, "archive-retention", 400*24*time.Hour, "how long the archive keeps history: whole day partitions older than this are dropped")
	boolean(&c.DevSeed, "dev-seed", true, "in dev mode, seed a demo tenant, API key and budget")
	// On by default: denial-heavy traffic must not fill Redis at full speed
	// (internal/ratelimit defaultguard.go has the numbers and why).
	str(&c.GuardPolicy, "guard-policy", "cyclesd-default-guard", "rate-limit policy applied per API key to runtime RPCs (default: cyclesd-default-guard, created at start, 1,000 calls/s with a burst of 2,000; empty: off)")
	str(methodPolicies, "guard-method-policies", "", "per-method guard policies: /pkg.Service/Method=policy,...")
	str(&c.EnvoyRLSConfig, "envoy-rls-config", "", "JSON file of Envoy rate-limit descriptor rules (enables the Envoy RLS API)")
	str(&c.CustomActionKinds, "custom-action-kinds", "", "declared custom.* action kinds: custom.<org>.<op>=<risk_class>,... (undeclared custom.* kinds are refused where policies govern kinds)")

	integer(&c.MaxRecvMsgBytes, "max-recv-msg-bytes", 1<<20, "largest gRPC request message of any method (read whole before any check)")
	integer(&c.MaxRuntimeRecvBytes, "max-runtime-recv-bytes", 64<<10, "largest RuntimeService request")
	integer(&c.MaxConcurrentStreams, "max-concurrent-streams", 256, "RPCs in flight per gRPC connection (HTTP/2 MAX_CONCURRENT_STREAMS)")
	integer(&c.MaxHeaderListBytes, "max-header-list-bytes", 16<<10, "largest request metadata (headers) of one gRPC call")
	integer(&c.MaxConnections, "max-connections", 1024, "open connections on the gRPC listener")
	integer(&c.RefusedStreamsPerConn, "refused-streams-per-conn", 16, "streams refused before their body (no or bad credentials, public-stream limits) within 1 s that close a gRPC connection at once, when it has had more refused than served")
	integer(&c.FloodClosuresPerPeer, "flood-closures-per-peer", 2, "connections of one peer (IPv4 address or IPv6 /64) closed by -refused-streams-per-conn, each within -flood-peer-cooldown of the previous, after which its new connections are closed at accept; 0: off (behind an L7 proxy)")
	dur(&c.FloodPeerCooldown, "flood-peer-cooldown", 10*time.Second, "how long a flooding peer's new gRPC connections are closed at accept after its last closure")
	integer(&c.HTTPMaxConnections, "http-max-connections", 1024, "open connections on the HTTP listener")
	integer(&c.HTTPMaxBodyBytes, "http-max-body-bytes", 1<<20, "largest HTTP request body")
	dur(&c.HandshakeTimeout, "handshake-timeout", 5*time.Second, "a connection must finish TLS and the HTTP/2 preface within this")
	dur(&c.MaxConnectionIdle, "max-connection-idle", 5*time.Minute, "close a gRPC connection that carried no RPC for this long")
	integer(&c.StreamsPerKey, "streams-per-key", 32, "concurrent WatchEvents streams per API key (the admin key counts as one)")
	integer(&c.StreamsTotal, "streams-total", 2048, "concurrent WatchEvents streams in all")
	integer(&c.WatchStreamRate, "watch-stream-rate", 500, "events/s one WatchEvents stream may read (replay pacing; negative: unlimited)")
	integer(&c.WatchTenantRate, "watch-tenant-rate", 1000, "events/s all of a tenant's WatchEvents streams on this replica may read together (negative: unlimited)")
	integer(&c.WatchFeedStreamRate, "watch-feed-stream-rate", 5000, "events/s one all-tenant feed stream (admin WatchEvents without tenant_id) may read once past -watch-feed-burst (negative: unlimited)")
	integer(&c.WatchFeedRate, "watch-feed-rate", 5000, "events/s all the all-tenant feed streams and listings on this replica may read together once past -watch-feed-burst (negative: unlimited)")
	integer(&c.WatchFeedBurst, "watch-feed-burst", 100000, "events an all-tenant feed stream may read before its rates apply (one sweep's expirations reach the operator unpaced)")
	integer(&c.StreamRedisPoolSize, "stream-redis-pool-size", 16, "Redis connections per node for stream work (a pool apart from unary RPCs)")
	integer(&c.AuthFailBurst, "auth-fail-burst", 20, "failed authentications a peer (IPv4 address or IPv6 /64) may make before it is throttled; 0: off (behind an L7 proxy)")
	fs.Float64Var(&c.AuthFailRate, "auth-fail-rate", 2, "failed authentications per second forgiven per peer")
	integer(&c.UnverifiedPerFailingPeer, "unverified-per-failing-peer", 4, "requests with a not-yet-verified API key in flight from a peer that failed recently")
	integer(&c.UnverifiedKeysPerPeer, "unverified-keys-per-peer", 8, "distinct not-yet-verified API keys in flight from one peer")
}

func (c *Config) validate() error {
	if !c.Dev() && c.AdminKey == "" {
		return fmt.Errorf("an admin key is required (-admin-key or %s)", EnvName("admin-key"))
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return fmt.Errorf("-tls-cert and -tls-key go together")
	}
	if c.TLSClientCA != "" && c.TLSCert == "" {
		return fmt.Errorf("-tls-client-ca needs -tls-cert and -tls-key")
	}
	// One rule for a key you set, in dev mode or not: at least
	// MinAdminKeyLen characters. The published dev key is the one exception,
	// and only in dev mode.
	if !c.Dev() && c.AdminKey == DevAdminKey {
		return fmt.Errorf("the published dev-mode admin key is refused outside dev mode; generate one (e.g. openssl rand -hex 24)")
	}
	if c.AdminKey != "" && c.AdminKey != DevAdminKey && len(c.AdminKey) < MinAdminKeyLen {
		return fmt.Errorf("admin key must be at least %d characters (e.g. openssl rand -hex 24)", MinAdminKeyLen)
	}
	if c.RequestTimeout <= 0 || c.SweeperInterval <= 0 {
		return fmt.Errorf("request-timeout and sweeper-interval must be positive")
	}
	if c.SweeperBatch <= 0 || c.SweeperBatch > 10000 {
		return fmt.Errorf("sweeper-batch must be between 1 and 10000")
	}
	if c.SweeperBatchTime < time.Microsecond || c.SweeperBatchTime > 100*time.Millisecond {
		return fmt.Errorf("sweeper-batch-time must be between 1µs and 100ms")
	}
	if c.AuditInterval < 0 {
		return fmt.Errorf("audit-interval must not be negative")
	}
	for _, v := range []struct {
		name string
		n    int
	}{
		{"max-recv-msg-bytes", c.MaxRecvMsgBytes}, {"max-runtime-recv-bytes", c.MaxRuntimeRecvBytes},
		{"max-concurrent-streams", c.MaxConcurrentStreams}, {"max-header-list-bytes", c.MaxHeaderListBytes},
		{"max-connections", c.MaxConnections}, {"http-max-connections", c.HTTPMaxConnections},
		{"refused-streams-per-conn", c.RefusedStreamsPerConn},
		{"http-max-body-bytes", c.HTTPMaxBodyBytes}, {"streams-per-key", c.StreamsPerKey},
		{"streams-total", c.StreamsTotal}, {"stream-redis-pool-size", c.StreamRedisPoolSize},
		{"unverified-per-failing-peer", c.UnverifiedPerFailingPeer}, {"unverified-keys-per-peer", c.UnverifiedKeysPerPeer},
	} {
		if v.n <= 0 {
			return fmt.Errorf("%s must be positive", v.name)
		}
	}
	if c.AuthFailBurst < 0 {
		return fmt.Errorf("auth-fail-burst must be 0 (off) or positive")
	}
	if c.AuthFailRate <= 0 || c.HandshakeTimeout <= 0 || c.MaxConnectionIdle <= 0 {
		return fmt.Errorf("auth-fail-rate, handshake-timeout and max-connection-idle must be positive")
	}
	if c.FloodClosuresPerPeer < 0 || c.FloodPeerCooldown <= 0 {
		return fmt.Errorf("flood-closures-per-peer must be 0 (off) or positive, and flood-peer-cooldown positive")
	}
	if c.ArchiveRetention < 48*time.Hour {
		return fmt.Errorf("archive-retention must be at least 48h (whole days are dropped)")
	}
	if c.HotRetention < time.Second {
		return fmt.Errorf("hot-retention must be at least 1s")
	}
	if c.LogFormat != "json" && c.LogFormat != "console" {
		return fmt.Errorf("log-format must be json or console")
	}
	return nil
}

// CORSOrigins lists the -http-cors-origins entries (comma or space separated).
func (c *Config) CORSOrigins() []string {
	return strings.FieldsFunc(c.HTTPCORSOrigins, func(r rune) bool { return r == ',' || r == ' ' })
}

// EnvName is the environment variable of a flag: CYCLESD_ + upper snake case.
func EnvName(flagName string) string {
	return "CYCLESD_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Usage prints `cyclesd -help`: the summary, an example and every flag.
func Usage(w io.Writer) {
	_, _ = LoadWithOutput([]string{"-help"}, func(string) string { return "" }, w)
}

// FromOS loads from os.Args and the process environment.
func FromOS() (*Config, error) { return Load(os.Args[1:], os.Getenv) }
