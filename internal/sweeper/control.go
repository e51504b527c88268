package sweeper

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/cyclesgo/cycles-go/internal/keys"
)

// Pause is the sweeper pause flag shared by every replica (keys.SweeperControl).
type Pause struct {
	Paused bool `json:"paused"`
	// PausedAt is Redis time when the pause was first set (ms); 0 when not paused.
	PausedAt  int64  `json:"paused_at"`
	Reason    string `json:"reason"`
	WasPaused bool   `json:"was_paused"`
}

func (s *Sweeper) control(ctx context.Context, op, reason string) (Pause, error) {
	var p Pause
	if err := scriptSweepControl.RunInto(ctx, s.exec, &p, controlKeys{keys.SweeperControl}, controlArgs{op, reason}); err != nil {
		return p, fmt.Errorf("sweeper control %s: %w", op, err)
	}
	return p, nil
}

// PauseState reads the shared pause flag.
func (s *Sweeper) PauseState(ctx context.Context) (Pause, error) { return s.control(ctx, "get", "") }

// SetPaused pauses (with reason) or resumes the background sweeps of every
// replica. Explicit sweeps (SweepOnce, SweepTenant) are not affected.
func (s *Sweeper) SetPaused(ctx context.Context, paused bool, reason string) (Pause, error) {
	op := "resume"
	if paused {
		op = "pause"
	}
	p, err := s.control(ctx, op, reason)
	if err == nil && p.WasPaused != paused {
		s.log.Warn("sweeper "+op+"d for every replica", zap.String("reason", reason))
	}
	return p, err
}

// SweepTenant drains one tenant's due reservations now, paused or not. It may
// run beside a sweep: every decision is made inside the script that mutates.
// A tenant with no record is TENANT_NOT_FOUND (checked by that script).
func (s *Sweeper) SweepTenant(ctx context.Context, tenant string) (Counts, time.Duration, error) {
	start := time.Now()
	c, _, err := s.drain(ctx, tenant, false, true)
	return c, time.Since(start), err
}
