// Package opsapi is the thin gRPC handler of OpsService (admin key only, per
// the server's auth rules): sweeper status and an on-demand sweep.
package opsapi

import (
	"context"
	"time"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/pkg/sweeper"
)

type handler struct {
	cyclesv1.UnimplementedOpsServiceServer
	sw *sweeper.Sweeper
}

// New returns the OpsService implementation.
func New(sw *sweeper.Sweeper) cyclesv1.OpsServiceServer {
	return &handler{sw: sw}
}

func (h *handler) GetSweeperStatus(context.Context, *cyclesv1.GetSweeperStatusRequest) (*cyclesv1.GetSweeperStatusResponse, error) {
	st := h.sw.Status()
	resp := &cyclesv1.GetSweeperStatusResponse{
		Enabled:           st.Running,
		IntervalMs:        st.Interval.Milliseconds(),
		BatchSize:         int32(st.BatchSize),
		LastRunDurationMs: st.LastRunDuration.Milliseconds(),
		Backlog:           st.Backlog,
		Totals:            counts(st.Totals),
		LastRun:           counts(st.LastRun),
	}
	if !st.LastRunStarted.IsZero() {
		resp.LastRunStartedMs = st.LastRunStarted.UnixMilli()
	}
	return resp, nil
}

// TriggerSweep runs a full sweep now. The sweep is detached from the RPC's
// deadline and cancellation: it is bounded work that is safe to finish (every
// step is idempotent), and abandoning it halfway would only leave work for the
// next sweep, while the per-RPC request timeout is far shorter than a large
// backlog takes to drain.
func (h *handler) TriggerSweep(ctx context.Context, _ *cyclesv1.TriggerSweepRequest) (*cyclesv1.TriggerSweepResponse, error) {
	start := time.Now()
	c, err := h.sw.SweepOnce(context.WithoutCancel(ctx))
	if err != nil {
		return nil, err
	}
	return &cyclesv1.TriggerSweepResponse{Counts: counts(c), DurationMs: time.Since(start).Milliseconds()}, nil
}

func counts(c sweeper.Counts) *cyclesv1.SweepCounts {
	return &cyclesv1.SweepCounts{
		Expired: c.Expired, Skipped: c.Skipped, InGrace: c.InGrace, NotFound: c.NotFound, Quarantined: c.Quarantined,
	}
}
