package validate

import (
	"fmt"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
)

// opsMaxScopes bounds the scopes of a quarantine resolution (a reservation
// holds at most six budgets).
const opsMaxScopes = 6

// OpsService request validators (shape only; internal/ledgerops and the scripts
// check state).
func init() {
	register(func(*cyclesv1.GetSweeperStatusRequest) error { return nil })
	register(func(*cyclesv1.TriggerSweepRequest) error { return nil })
	register(func(r *cyclesv1.PauseSweeperRequest) error { return Text("reason", r.GetReason(), adminMaxReason) })
	register(func(*cyclesv1.ResumeSweeperRequest) error { return nil })
	register(func(r *cyclesv1.SweepTenantRequest) error { return TenantID("tenant_id", r.GetTenantId()) })
	register(func(r *cyclesv1.ListQuarantinedRequest) error {
		if r.GetTenantId() != "" {
			if err := TenantID("tenant_id", r.GetTenantId()); err != nil {
				return err
			}
		}
		return first(
			Range("page_size", int64(r.GetPageSize()), 0, 500),
			Text("page_token", r.GetPageToken(), 2048),
		)
	})
	register(func(r *cyclesv1.ResolveQuarantinedRequest) error {
		if err := first(
			TenantID("tenant_id", r.GetTenantId()),
			ID("reservation_id", r.GetReservationId(), 128),
			IdempotencyKey("idempotency_key", r.GetIdempotencyKey()),
			Text("reason", r.GetReason(), adminMaxReason),
		); err != nil {
			return err
		}
		switch o := r.GetOutcome().(type) {
		case *cyclesv1.ResolveQuarantinedRequest_Release:
			amounts := o.Release.GetAmounts()
			if len(amounts) > opsMaxScopes {
				return invalid("release.amounts", "at most %d scopes", opsMaxScopes)
			}
			for i, a := range amounts {
				f := fmt.Sprintf("release.amounts[%d]", i)
				if err := first(
					AdminScopePath(f+".scope_path", a.GetScopePath()),
					NonNegative(f+".amount", a.GetAmount()),
				); err != nil {
					return err
				}
			}
		case *cyclesv1.ResolveQuarantinedRequest_ExpireWithoutRefund:
		case *cyclesv1.ResolveQuarantinedRequest_Requeue:
			q := o.Requeue
			if q.Estimate != nil {
				if err := NonNegative("requeue.estimate", q.GetEstimate()); err != nil {
					return err
				}
			}
			if err := OptionalUnit("requeue.unit", q.GetUnit()); err != nil {
				return err
			}
			if len(q.GetBudgetedScopes()) > opsMaxScopes {
				return invalid("requeue.budgeted_scopes", "at most %d scopes", opsMaxScopes)
			}
			for i, s := range q.GetBudgetedScopes() {
				if err := AdminScopePath(fmt.Sprintf("requeue.budgeted_scopes[%d]", i), s); err != nil {
					return err
				}
			}
			if q.ExpiresAtMs != nil {
				if err := Range("requeue.expires_at_ms", q.GetExpiresAtMs(), 0, 1<<53-1); err != nil {
					return err
				}
			}
			if q.GraceMs != nil {
				if err := Range("requeue.grace_ms", q.GetGraceMs(), 0, MaxGraceMs); err != nil {
					return err
				}
			}
		default:
			return invalid("outcome", "choose release, expire_without_refund or requeue")
		}
		return nil
	})
	register(func(r *cyclesv1.AuditTenantRequest) error {
		return first(
			TenantID("tenant_id", r.GetTenantId()),
			Range("max_discrepancies", int64(r.GetMaxDiscrepancies()), 0, 10000),
		)
	})
	register(func(r *cyclesv1.RepairTenantRequest) error {
		if err := TenantID("tenant_id", r.GetTenantId()); err != nil {
			return err
		}
		if r.GetApply() {
			return IdempotencyKey("idempotency_key", r.GetIdempotencyKey())
		}
		if r.GetIdempotencyKey() != "" {
			return IdempotencyKey("idempotency_key", r.GetIdempotencyKey())
		}
		return nil
	})
}
