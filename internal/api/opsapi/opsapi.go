// Package opsapi is the thin gRPC handler of OpsService (admin key only, per
// the server's auth rules): sweeper status, controls and on-demand sweeps
// (internal/sweeper), and the ledger audit, repair and quarantine tools
// (internal/ledgerops). Runbook: docs/operations-runbook.md.
package opsapi

import (
	"context"
	"time"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/ledgerops"
	"github.com/cyclesgo/cycles-go/internal/sweeper"
)

type handler struct {
	cyclesv1.UnimplementedOpsServiceServer
	sw  *sweeper.Sweeper
	ops *ledgerops.Service
}

// New returns the OpsService implementation.
func New(sw *sweeper.Sweeper, ops *ledgerops.Service) cyclesv1.OpsServiceServer {
	return &handler{sw: sw, ops: ops}
}

func (h *handler) GetSweeperStatus(ctx context.Context, _ *cyclesv1.GetSweeperStatusRequest) (*cyclesv1.GetSweeperStatusResponse, error) {
	st := h.sw.Status()
	p, err := h.sw.PauseState(ctx)
	if err != nil {
		return nil, err
	}
	resp := &cyclesv1.GetSweeperStatusResponse{
		Enabled:           st.Running,
		IntervalMs:        st.Interval.Milliseconds(),
		BatchSize:         int32(st.BatchSize),
		LastRunDurationMs: st.LastRunDuration.Milliseconds(),
		Backlog:           st.Backlog,
		Totals:            counts(st.Totals),
		LastRun:           counts(st.LastRun),
		Paused:            p.Paused,
		PausedAtMs:        p.PausedAt,
		PauseReason:       p.Reason,
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

func (h *handler) PauseSweeper(ctx context.Context, req *cyclesv1.PauseSweeperRequest) (*cyclesv1.PauseSweeperResponse, error) {
	p, err := h.sw.SetPaused(ctx, true, req.GetReason())
	if err != nil {
		return nil, err
	}
	return &cyclesv1.PauseSweeperResponse{Paused: p.Paused, PausedAtMs: p.PausedAt}, nil
}

func (h *handler) ResumeSweeper(ctx context.Context, _ *cyclesv1.ResumeSweeperRequest) (*cyclesv1.ResumeSweeperResponse, error) {
	p, err := h.sw.SetPaused(ctx, false, "")
	if err != nil {
		return nil, err
	}
	return &cyclesv1.ResumeSweeperResponse{WasPaused: p.WasPaused}, nil
}

// SweepTenant is detached from the RPC deadline for the reason TriggerSweep is.
func (h *handler) SweepTenant(ctx context.Context, req *cyclesv1.SweepTenantRequest) (*cyclesv1.SweepTenantResponse, error) {
	c, d, err := h.sw.SweepTenant(context.WithoutCancel(ctx), req.GetTenantId())
	if err != nil {
		return nil, err
	}
	return &cyclesv1.SweepTenantResponse{Counts: counts(c), DurationMs: d.Milliseconds()}, nil
}

func (h *handler) ListQuarantined(ctx context.Context, req *cyclesv1.ListQuarantinedRequest) (*cyclesv1.ListQuarantinedResponse, error) {
	return h.ops.ListQuarantined(ctx, req)
}

func (h *handler) ResolveQuarantined(ctx context.Context, req *cyclesv1.ResolveQuarantinedRequest) (*cyclesv1.ResolveQuarantinedResponse, error) {
	return h.ops.Resolve(ctx, req)
}

func (h *handler) AuditTenant(ctx context.Context, req *cyclesv1.AuditTenantRequest) (*cyclesv1.AuditTenantResponse, error) {
	return h.ops.Audit(ctx, req)
}

func (h *handler) RepairTenant(ctx context.Context, req *cyclesv1.RepairTenantRequest) (*cyclesv1.RepairTenantResponse, error) {
	return h.ops.Repair(ctx, req)
}

func counts(c sweeper.Counts) *cyclesv1.SweepCounts {
	return &cyclesv1.SweepCounts{
		Expired: c.Expired, Skipped: c.Skipped, InGrace: c.InGrace, NotFound: c.NotFound, Quarantined: c.Quarantined,
	}
}
