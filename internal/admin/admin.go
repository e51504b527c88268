// Package admin is the admin plane of cyclesd (AdminService): tenants, API
// keys and budgets, plus API-key verification for the auth interceptor.
//
// Every mutation is one Lua script under lua/admin (one EVALSHA): the script
// validates everything against current state and refuses before its first
// write, writes, and appends its events to the tenant's stream in the same
// script. Go only shapes requests (canonical scope paths, payload hashes,
// event context) and turns script results into protobuf. Redis TIME is the
// only clock of every record.
//
// See README.md for the invariants and the tests that prove them.
package admin

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/defaults"
	"github.com/cyclesgo/cycles-go/internal/eventctx"
	"github.com/cyclesgo/cycles-go/internal/script"
	"github.com/cyclesgo/cycles-go/internal/telemetry"
)

// Defaults.
const (
	// DefaultKeyCacheTTL bounds how long a verified API key is trusted without
	// asking Redis (so how long another replica keeps accepting a revoked key).
	DefaultKeyCacheTTL = 5 * time.Second
	// DefaultKeyNegativeCacheTTL is how long a refused key is remembered.
	DefaultKeyNegativeCacheTTL = 2 * time.Second
	// DefaultKeyCacheSize bounds the verified-key cache.
	DefaultKeyCacheSize = 10_000
	// FundingReplayWindow is how long a funding idempotency key is remembered.
	FundingReplayWindow = 24 * time.Hour
	// CloseReleaseBatch is the batch size asked of the TenantReleaser per call.
	CloseReleaseBatch = 500
)

// TenantReleaser releases a closed tenant's open reservations through the
// ledger's release path (implemented by the ledger). Each call releases at
// most batch reservations and reports whether more remain.
type TenantReleaser interface {
	ReleaseForTenantClose(ctx context.Context, tenant string, batch int) (released int, more bool, err error)
}

// Options configure a Service.
type Options struct {
	// MeterProvider receives the admin and auth counters (nil = no-op).
	MeterProvider metric.MeterProvider
	// EventRetention is passed to every event-emitting script (0 = eventctx.DefaultRetention).
	EventRetention time.Duration
	// KeyCacheTTL is how long a positive key verification is cached (0 = 5 s;
	// negative disables the cache).
	KeyCacheTTL time.Duration
	// KeyCacheSize bounds the cache (0 = 10,000 entries; the same bound
	// applies to the negative cache).
	KeyCacheSize int
	// KeyNegativeCacheTTL is how long a refused key (by the hash of the whole
	// presented key) is refused without asking Redis (0 = 2 s; negative
	// disables it).
	KeyNegativeCacheTTL time.Duration
	// Releaser releases open reservations on CloseTenant (nil = skip that step).
	Releaser TenantReleaser
}

// Service implements the AdminService RPCs and auth.Verifier.
type Service struct {
	exec      *script.Executor
	retention time.Duration
	releaser  TenantReleaser
	keys      *keyCache
	touches   *keyTouches
	m         counters
}

var (
	_ auth.Verifier      = (*Service)(nil)
	_ auth.LocalVerifier = (*Service)(nil)
)

type counters struct {
	tenantsCreated  metric.Int64Counter
	tenantsUpdated  metric.Int64Counter
	tenantsClosed   metric.Int64Counter
	closeReleased   metric.Int64Counter
	keysCreated     metric.Int64Counter
	keysRevoked     metric.Int64Counter
	budgetsCreated  metric.Int64Counter
	budgetsUpdated  metric.Int64Counter
	budgetStatus    metric.Int64Counter
	funded          metric.Int64Counter
	fundingReplays  metric.Int64Counter
	refusals        metric.Int64Counter
	authFailures    metric.Int64Counter
	authCacheHits   metric.Int64Counter
	authCacheMisses metric.Int64Counter
	authNegHits     metric.Int64Counter

	invalidationsHeard   metric.Int64Counter
	invalidationFailures metric.Int64Counter
}

// New builds the admin service on exec.
func New(exec *script.Executor, opts Options) *Service {
	ttl := opts.KeyCacheTTL
	if ttl == 0 {
		ttl = DefaultKeyCacheTTL
	}
	size := opts.KeyCacheSize
	defaults.Set(&size, DefaultKeyCacheSize)
	negTTL := opts.KeyNegativeCacheTTL
	if negTTL == 0 {
		negTTL = DefaultKeyNegativeCacheTTL
	}
	mt := telemetry.Meter(opts.MeterProvider, "admin")
	c := func(name, desc string) metric.Int64Counter { return telemetry.MustCounter(mt, name, desc) }
	return &Service{
		exec:      exec,
		retention: opts.EventRetention,
		releaser:  opts.Releaser,
		keys:      newKeyCache(ttl, size, time.Now).withNegative(negTTL),
		touches:   newKeyTouches(size, time.Now),
		m: counters{
			tenantsCreated:  c("cycles.admin.tenants.created", "Tenants created"),
			tenantsUpdated:  c("cycles.admin.tenants.updated", "UpdateTenant calls applied (attribute status: the status after)"),
			tenantsClosed:   c("cycles.admin.tenants.closed", "Tenants flipped to CLOSED"),
			closeReleased:   c("cycles.admin.tenant_close.released", "Open reservations released by tenant closes"),
			keysCreated:     c("cycles.admin.api_keys.created", "API keys created"),
			keysRevoked:     c("cycles.admin.api_keys.revoked", "API keys revoked"),
			budgetsCreated:  c("cycles.admin.budgets.created", "Budgets created (attribute unit)"),
			budgetsUpdated:  c("cycles.admin.budgets.updated", "Budget updates"),
			budgetStatus:    c("cycles.admin.budgets.status_changes", "Budget status changes (attribute status: FROZEN, ACTIVE, CLOSED)"),
			funded:          c("cycles.admin.budgets.funded", "Funding operations applied (attribute operation)"),
			fundingReplays:  c("cycles.admin.funding.replays", "Funding requests answered from the idempotency record"),
			refusals:        c("cycles.admin.refusals", "Admin requests refused by the domain (attributes rpc, reason)"),
			authFailures:    c("cycles.auth.failures", "API-key verifications refused (attribute reason)"),
			authCacheHits:   c("cycles.auth.cache_hits", "API-key verifications answered from the in-process cache"),
			authCacheMisses: c("cycles.auth.cache_misses", "API-key verifications that read Redis"),
			authNegHits:     c("cycles.auth.negative_cache_hits", "API-key refusals answered from the in-process negative cache"),
			invalidationsHeard: c("cycles.auth.invalidations_received",
				"API-key invalidations received from replicas (KeyInvalidations pub/sub)"),
			invalidationFailures: c("cycles.auth.invalidation_failures",
				"API-key invalidations that could not be published (other replicas fall back to the cache TTL)"),
		},
	}
}

// eventContext is the event-context ARGV of one script call.
func (s *Service) eventContext(ctx context.Context) string {
	return eventctx.Arg(ctx, s.retention)
}

// CountRefusal counts a refusal of the admin RPC rpc in cycles.admin.refusals
// (protocol errors only; anything else is not a refusal). AdminService's
// interceptor (internal/api/adminapi) calls it for every RPC, so no method
// counts its own.
func (s *Service) CountRefusal(ctx context.Context, rpc string, err error) {
	if ae, ok := apierr.As(err); ok {
		s.m.refusals.Add(ctx, 1, metric.WithAttributes(attribute.String("rpc", rpc), attribute.String("reason", string(ae.Code))))
	}
}

// pageLimit is a listing's page size: the requested limit, def when unset,
// at most max.
func pageLimit(requested int32, def, max int) int {
	limit := int(requested)
	if limit <= 0 {
		return def
	}
	return min(limit, max)
}

// jsonList is a script's JSON array (script.LuaArray).
type jsonList[T any] = script.LuaArray[T]
