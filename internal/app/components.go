package app

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/cyclesgo/cycles-go/internal/actionkind"
	"github.com/cyclesgo/cycles-go/internal/admin"
	"github.com/cyclesgo/cycles-go/internal/api/actionkindapi"
	"github.com/cyclesgo/cycles-go/internal/api/adminapi"
	"github.com/cyclesgo/cycles-go/internal/api/auditapi"
	"github.com/cyclesgo/cycles-go/internal/api/authapi"
	"github.com/cyclesgo/cycles-go/internal/api/envoyrls"
	"github.com/cyclesgo/cycles-go/internal/api/eventsapi"
	"github.com/cyclesgo/cycles-go/internal/api/operatorapi"
	"github.com/cyclesgo/cycles-go/internal/api/opsapi"
	"github.com/cyclesgo/cycles-go/internal/api/overviewapi"
	"github.com/cyclesgo/cycles-go/internal/api/policyapi"
	"github.com/cyclesgo/cycles-go/internal/api/ratelimitapi"
	"github.com/cyclesgo/cycles-go/internal/api/runtimeapi"
	"github.com/cyclesgo/cycles-go/internal/api/usageapi"
	"github.com/cyclesgo/cycles-go/internal/audit"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/bulk"
	"github.com/cyclesgo/cycles-go/internal/config"
	"github.com/cyclesgo/cycles-go/internal/events"
	"github.com/cyclesgo/cycles-go/internal/ledger"
	"github.com/cyclesgo/cycles-go/internal/ledgerops"
	"github.com/cyclesgo/cycles-go/internal/overview"
	"github.com/cyclesgo/cycles-go/internal/policy"
	"github.com/cyclesgo/cycles-go/internal/ratelimit"
	"github.com/cyclesgo/cycles-go/internal/script"
	"github.com/cyclesgo/cycles-go/internal/server"
	"github.com/cyclesgo/cycles-go/internal/store"
	"github.com/cyclesgo/cycles-go/internal/sweeper"
	"github.com/cyclesgo/cycles-go/internal/usage"
)

// components are the assembled domain packages and handlers.
type components struct {
	meterProvider metric.MeterProvider
	verifier      auth.Verifier
	guard         grpc.UnaryServerInterceptor
	// inner are the services' own interceptors (server.Options.Inner).
	inner    []grpc.UnaryServerInterceptor
	services server.Services
	workers  []func(context.Context) error

	admin  *admin.Service
	audit  *audit.Service
	kinds  *actionkind.Registry
	ledger *ledger.Ledger
	// archived serves reads past the hot window once the archive is open.
	archived *archivedReads
	sweeper  *sweeper.Sweeper
	feed     *events.Announcer
	limiter  *ratelimit.Limiter
}

// build wires the domain packages; event streams use streamExec (a separate
// Redis pool, every call bounded by -request-timeout).
func build(cfg *config.Config, log *zap.Logger, mp metric.MeterProvider, exec, streamExec *script.Executor) (*components, error) {
	custom, err := actionkind.ParseCustom(cfg.CustomActionKinds)
	if err != nil {
		return nil, fmt.Errorf("-custom-action-kinds: %w", err)
	}
	kinds, err := actionkind.New(custom)
	if err != nil {
		return nil, fmt.Errorf("-custom-action-kinds: %w", err)
	}
	// With an archive every settling script queues the record for the
	// archiver (internal/archiver) instead of giving it the 30-day TTL.
	archiving := cfg.ArchiveDSN != ""
	archived := &archivedReads{}
	lopts := ledger.Options{MeterProvider: mp, EventRetention: cfg.EventRetention,
		TenantLabel: cfg.MetricsTenantLabel, Archive: archiving, Kinds: kinds}
	if archiving {
		lopts.Archived = archived.reservation
		lopts.ArchivedList = archived.reservations
	}
	led := ledger.New(exec, lopts)
	adm := admin.New(exec, admin.Options{
		MeterProvider:  mp,
		EventRetention: cfg.EventRetention,
		KeyCacheTTL:    cfg.KeyCacheTTL,
		Releaser:       led,

		KeyNegativeCacheTTL: cfg.KeyNegativeCacheTTL,
	})
	// The all-tenant event feed: every script run that appends events is
	// announced to it (internal/events/doc.go); the sweeper reconciles.
	ann := events.NewAnnouncer(exec, events.AnnouncerOptions{Retention: cfg.EventRetention, MeterProvider: mp, Logger: log.Named("feed")})
	exec.SetEventHook(ann.Hook)
	sw := sweeper.New(exec, sweeper.Options{
		Interval:       cfg.SweeperInterval,
		BatchSize:      cfg.SweeperBatch,
		BatchTime:      cfg.SweeperBatchTime,
		EventRetention: cfg.EventRetention,
		Archive:        archiving,
		Reconcile:      ann.Reconcile,
		MeterProvider:  mp,
		Logger:         log.Named("sweeper"),
	})
	eopts := events.Options{
		Retention: cfg.EventRetention,
		Heartbeat: cfg.EventHeartbeat,
		// Replay pacing: one tenant's catch-up cannot take the CPU the
		// other tenants' reserves need (internal/events pace.go).
		StreamEventsPerSecond:     float64(cfg.WatchStreamRate),
		TenantEventsPerSecond:     float64(cfg.WatchTenantRate),
		FeedStreamEventsPerSecond: float64(cfg.WatchFeedStreamRate),
		FeedEventsPerSecond:       float64(cfg.WatchFeedRate),
		FeedBurstEvents:           cfg.WatchFeedBurst,
		MeterProvider:             mp,
		Logger:                    log.Named("events"),
	}
	aopts := audit.Options{Retention: cfg.AuditRetention, MeterProvider: mp, Logger: log.Named("audit")}
	if archiving {
		// Past Redis retention, reads continue from the archive.
		eopts.ArchivedStream, eopts.ArchivedEvent = archived.stream, archived.event
		eopts.ArchiveRetention = cfg.ArchiveRetention
		aopts.ArchivedStream = archived.stream
	}
	ev := events.New(streamExec, eopts)
	ops := ledgerops.New(exec, ledgerops.Options{
		AuditInterval:  cfg.AuditInterval,
		EventRetention: cfg.EventRetention,
		Archive:        archiving,
		MeterProvider:  mp,
		Logger:         log.Named("ledgerops"),
	})
	lim := ratelimit.New(exec, ratelimit.Options{MeterProvider: mp})
	aud := audit.New(exec, aopts)
	// Alert if eviction ever touches limiter (or ledger) keys.
	evicted := func(ctx context.Context) (int64, error) { return store.EvictedKeys(ctx, exec.Client()) }
	if _, err := ratelimit.RegisterEvictionMetric(mp, evicted); err != nil {
		return nil, fmt.Errorf("eviction metric: %w", err)
	}

	pol := policy.New(exec, policy.Options{Kinds: kinds})
	c := &components{
		archived:      archived,
		meterProvider: mp,
		verifier:      adm,
		admin:         adm,
		audit:         aud,
		kinds:         kinds,
		ledger:        led,
		sweeper:       sw,
		feed:          ann,
		limiter:       lim,
		inner:         []grpc.UnaryServerInterceptor{adminapi.CountRefusals(adm)},
		services: server.Services{
			Runtime:       runtimeapi.New(led),
			Admin:         adminapi.New(adm),
			Events:        eventsapi.New(ev),
			RateLimit:     ratelimitapi.New(lim),
			Ops:           opsapi.New(sw, ops),
			ActionKinds:   actionkindapi.New(kinds),
			Auth:          authapi.New(adm),
			Policy:        policyapi.New(pol),
			QuotaCounters: policyapi.NewQuotaCounters(pol),
			Audit:         auditapi.New(aud),
			Operator:      operatorapi.New(bulk.New(exec, adm, aud)),
			Overview:      overviewapi.New(overview.New(exec, overview.Options{})),
		},
	}
	if archiving {
		// Usage reports read the archive: without one there are none.
		c.services.Usage = usageapi.New(usage.New(archived))
	}
	if cfg.GuardPolicy != "" || len(cfg.GuardMethodPolicies) > 0 {
		c.guard = server.RateLimitGuard(lim, ratelimit.GuardConfig{Policy: cfg.GuardPolicy, MethodPolicies: cfg.GuardMethodPolicies})
	}
	if cfg.EnvoyRLSConfig != "" {
		rls, err := loadEnvoyRLS(cfg.EnvoyRLSConfig, lim, mp)
		if err != nil {
			return nil, err
		}
		c.services.Register = rls
	}
	// Revocations and key changes on other replicas reach this one's
	// verified-key cache through pub/sub (internal/admin invalidate.go).
	// last_used_at of API keys is written in the background (keytouch.go).
	c.workers = append(c.workers, ann.Run, adm.WatchKeyInvalidations, adm.RunKeyTouches)
	if cfg.SweeperEnabled {
		c.workers = append(c.workers, sw.Run)
	}
	if cfg.AuditInterval > 0 {
		c.workers = append(c.workers, ops.RunAuditor)
	}
	return c, nil
}

// loadEnvoyRLS reads the Envoy descriptor rules and returns the registration
// of the Envoy rate limit service.
func loadEnvoyRLS(path string, lim *ratelimit.Limiter, mp metric.MeterProvider) (func(*grpc.Server), error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("envoy rls config: %w", err)
	}
	var rc envoyrls.Config
	if err := json.Unmarshal(raw, &rc); err != nil {
		return nil, fmt.Errorf("envoy rls config %s: %w", path, err)
	}
	srv, err := envoyrls.New(lim, rc, mp)
	if err != nil {
		return nil, err
	}
	return srv.Register, nil
}

// flushFeed announces what the drained RPCs appended, after the server
// stopped (the announcer's own loop may already have ended).
func (c *components) flushFeed() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_ = c.feed.Flush(ctx)
}
