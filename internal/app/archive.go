package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/cyclesgo/cycles-go/internal/archive"
	"github.com/cyclesgo/cycles-go/internal/archiver"
	"github.com/cyclesgo/cycles-go/internal/config"
	"github.com/cyclesgo/cycles-go/internal/ledger"
	"github.com/cyclesgo/cycles-go/internal/script"
)

// openArchive connects the PostgreSQL archive when -archive-dsn is set and
// applies its migrations; it fails the start when PostgreSQL is unreachable
// (an operator who configured an archive gets one or no cyclesd). The
// returned workers keep the day partitions and archive the settled
// reservations the ledger queues (build turns the queueing on with the
// DSN); warn names what /readyz reports. Without a DSN it returns nils and
// cyclesd runs exactly as without the feature.
func openArchive(ctx context.Context, cfg *config.Config, log *zap.Logger, mp metric.MeterProvider, exec *script.Executor) (
	st *archive.Store, workers []func(context.Context) error, warn func() []string, err error) {
	if cfg.ArchiveDSN == "" {
		return nil, nil, nil, nil
	}
	st, err = archive.Open(ctx, cfg.ArchiveDSN)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("-archive-dsn: %w", err)
	}
	fail := func(err error) (*archive.Store, []func(context.Context) error, func() []string, error) {
		st.Close()
		return nil, nil, nil, fmt.Errorf("-archive-dsn: %w", err)
	}
	v, err := st.SchemaVersion(ctx)
	if err != nil {
		return fail(err)
	}
	m := archiver.NewMaintainer(exec, st, archiver.Options{Retention: cfg.ArchiveRetention, Logger: log.Named("archive")})
	if _, err := m.Once(ctx); err != nil {
		return fail(fmt.Errorf("day partitions: %w", err))
	}
	a, err := archiver.New(exec, st, archiver.ArchiverOptions{HotRetention: cfg.HotRetention, MeterProvider: mp,
		Logger: log.Named("archive")})
	if err != nil {
		return fail(err)
	}
	log.Info("archive ready: schema migrated, day partitions kept, settled reservations, events and audit entries archived",
		zap.Int("schema_version", v), zap.Duration("retention", cfg.ArchiveRetention),
		zap.Duration("hot_retention", cfg.HotRetention))
	return st, []func(context.Context) error{m.Run, a.Run}, a.Warnings, nil
}

// archivedReads answers the ledger's reads past the hot window from the
// archive; its store is set once the archive is open, before cyclesd serves.
type archivedReads struct{ store *archive.Store }

func (r *archivedReads) reservation(ctx context.Context, tenant, id string) (map[string]string, bool, error) {
	if r.store == nil {
		return nil, false, nil
	}
	return archiver.Reader{Store: r.store}.Reservation(ctx, tenant, id)
}

func (r *archivedReads) reservations(ctx context.Context, tenant string, q ledger.ArchiveQuery) ([]ledger.ArchivedRecord, error) {
	if r.store == nil {
		return nil, nil
	}
	return archiver.Reader{Store: r.store}.Reservations(ctx, tenant, q)
}

func (r *archivedReads) stream(ctx context.Context, key string, desc bool, hi, lo string, n int) ([][]string, error) {
	if r.store == nil {
		return nil, nil
	}
	return archiver.Reader{Store: r.store}.Stream(ctx, key, desc, hi, lo, n)
}

func (r *archivedReads) event(ctx context.Context, tenant, id string) ([]string, bool, error) {
	if r.store == nil {
		return nil, false, nil
	}
	return archiver.Reader{Store: r.store}.Event(ctx, tenant, id)
}

// errArchiveClosed answers a usage report asked before the archive opened.
var errArchiveClosed = errors.New("the archive is not open")

// Usage and Denials make the archive the usage reports' source.
func (r *archivedReads) Usage(ctx context.Context, q archive.UsageQuery) ([]archive.UsageRow, error) {
	if r.store == nil {
		return nil, errArchiveClosed
	}
	return r.store.Usage(ctx, q)
}

func (r *archivedReads) Denials(ctx context.Context, tenant string, from, to time.Time, fn func(archive.Entry) error) error {
	if r.store == nil {
		return errArchiveClosed
	}
	return r.store.Denials(ctx, tenant, from, to, fn)
}
