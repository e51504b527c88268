package app

import (
	"context"
	"fmt"

	"go.uber.org/zap"

	"github.com/cyclesgo/cycles-go/internal/archive"
	"github.com/cyclesgo/cycles-go/internal/archiver"
	"github.com/cyclesgo/cycles-go/internal/config"
	"github.com/cyclesgo/cycles-go/internal/script"
)

// openArchive connects the PostgreSQL archive when -archive-dsn is set and
// applies its migrations; it fails the start when PostgreSQL is unreachable
// (an operator who configured an archive gets one or no cyclesd). The
// returned worker keeps the day partitions. Without a DSN it returns nils
// and cyclesd runs exactly as without the feature.
func openArchive(ctx context.Context, cfg *config.Config, log *zap.Logger, exec *script.Executor) (*archive.Store, func(context.Context) error, error) {
	if cfg.ArchiveDSN == "" {
		return nil, nil, nil
	}
	st, err := archive.Open(ctx, cfg.ArchiveDSN)
	if err != nil {
		return nil, nil, fmt.Errorf("-archive-dsn: %w", err)
	}
	v, err := st.SchemaVersion(ctx)
	if err != nil {
		st.Close()
		return nil, nil, fmt.Errorf("-archive-dsn: %w", err)
	}
	m := archiver.NewMaintainer(exec, st, archiver.Options{Retention: cfg.ArchiveRetention, Logger: log.Named("archive")})
	if _, err := m.Once(ctx); err != nil {
		st.Close()
		return nil, nil, fmt.Errorf("-archive-dsn: day partitions: %w", err)
	}
	log.Info("archive ready: schema migrated, day partitions kept", zap.Int("schema_version", v),
		zap.Duration("retention", cfg.ArchiveRetention))
	log.Warn("archive: this build prepares the schema only; settled reservations, events and audit entries are not copied yet and stay in Redis under today's retention (docs/archive.md)")
	return st, m.Run, nil
}
