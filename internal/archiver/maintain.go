package archiver

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/cyclesgo/cycles-go/internal/archive"
	"github.com/cyclesgo/cycles-go/internal/defaults"
	"github.com/cyclesgo/cycles-go/internal/script"
)

var scriptClock = script.Bind[script.None, script.None]("archive/clock")

// DefaultInterval is the pause between upkeep rounds: partitions are made a
// day ahead, so an hour leaves ample room for a PostgreSQL outage.
const DefaultInterval = time.Hour

// Options tune a Maintainer.
type Options struct {
	// Retention is how long archived history is kept (-archive-retention).
	Retention time.Duration
	// Interval is the pause between rounds (default DefaultInterval).
	Interval time.Duration
	Logger   *zap.Logger
}

// Maintainer keeps the archive's day partitions.
type Maintainer struct {
	exec  *script.Executor
	store *archive.Store
	opts  Options
}

// NewMaintainer returns the upkeep of store, on exec's Redis clock.
func NewMaintainer(exec *script.Executor, store *archive.Store, o Options) *Maintainer {
	defaults.Set(&o.Interval, DefaultInterval)
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	return &Maintainer{exec: exec, store: store, opts: o}
}

// Now is Redis TIME.
func (m *Maintainer) Now(ctx context.Context) (time.Time, error) {
	var r struct {
		NowMs int64 `json:"now_ms"`
	}
	if err := scriptClock.RunInto(ctx, m.exec, &r, script.None{}, script.None{}); err != nil {
		return time.Time{}, fmt.Errorf("archive clock: %w", err)
	}
	return time.UnixMilli(r.NowMs).UTC(), nil
}

// Once makes today's and tomorrow's partitions (Redis TIME) and drops the
// days wholly older than the retention; it returns the dropped partitions.
func (m *Maintainer) Once(ctx context.Context) ([]string, error) {
	now, err := m.Now(ctx)
	if err != nil {
		return nil, err
	}
	if err := m.store.EnsureDays(ctx, now, now.Add(24*time.Hour)); err != nil {
		return nil, err
	}
	return m.store.DropBefore(ctx, now.Add(-m.opts.Retention))
}

// Run repeats Once every Interval until ctx ends; a failed round (Redis or
// PostgreSQL down) is logged and retried next round, never fatal.
func (m *Maintainer) Run(ctx context.Context) error {
	t := time.NewTicker(m.opts.Interval)
	defer t.Stop()
	for {
		dropped, err := m.Once(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			m.opts.Logger.Warn("archive upkeep failed; retrying next round", zap.Error(err))
		case len(dropped) > 0:
			m.opts.Logger.Info("archive: dropped day partitions past the retention", zap.Strings("partitions", dropped))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
