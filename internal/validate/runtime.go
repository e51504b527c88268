package validate

import (
	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/scope"
)

// Runtime request validators (docs/protocol.md).
func init() {
	register(func(r *cyclesv1.CreateReservationRequest) error {
		if err := spend(r.GetIdempotencyKey(), r.GetSubject(), r.GetAction(), "estimate", r.GetEstimate()); err != nil {
			return err
		}
		if r.TtlMs != nil {
			if err := Range("ttl_ms", r.GetTtlMs(), MinTTLms, MaxTTLms); err != nil {
				return err
			}
		}
		if r.GracePeriodMs != nil {
			if err := Range("grace_period_ms", r.GetGracePeriodMs(), 0, MaxGraceMs); err != nil {
				return err
			}
		}
		return first(
			Policy("overage_policy", r.GetOveragePolicy()),
			ObserveMode("observe_mode", r.GetObserveMode()),
			Metadata("metadata", r.GetMetadata()),
		)
	})
	register(func(r *cyclesv1.CommitReservationRequest) error {
		return first(
			ID("reservation_id", r.GetReservationId(), 128),
			IdempotencyKey("idempotency_key", r.GetIdempotencyKey()),
			Amount("actual", r.GetActual()),
			Metrics("metrics", r.GetMetrics()),
			Metadata("metadata", r.GetMetadata()),
		)
	})
	register(func(r *cyclesv1.ReleaseReservationRequest) error {
		return first(
			ID("reservation_id", r.GetReservationId(), 128),
			IdempotencyKey("idempotency_key", r.GetIdempotencyKey()),
			Text("reason", r.GetReason(), 256),
		)
	})
	register(func(r *cyclesv1.ExtendReservationRequest) error {
		return first(
			ID("reservation_id", r.GetReservationId(), 128),
			IdempotencyKey("idempotency_key", r.GetIdempotencyKey()),
			Range("extend_by_ms", r.GetExtendByMs(), 1, MaxTTLms),
			Metadata("metadata", r.GetMetadata()),
		)
	})
	register(func(r *cyclesv1.GetReservationRequest) error {
		return ID("reservation_id", r.GetReservationId(), 128)
	})
	register(func(r *cyclesv1.ListReservationsRequest) error {
		if r.GetIdempotencyKey() != "" {
			if err := IdempotencyKey("idempotency_key", r.GetIdempotencyKey()); err != nil {
				return err
			}
		}
		if err := first(
			declared("status", r.GetStatus(), "unknown status"),
			filterValues(r.GetTenant(), r.GetWorkspace(), r.GetApp(), r.GetWorkflow(), r.GetAgent(), r.GetToolset()),
		); err != nil {
			return err
		}
		windows := []struct {
			name     string
			from, to *int64
		}{
			{"created", r.CreatedFromMs, r.CreatedToMs},
			{"expires", r.ExpiresFromMs, r.ExpiresToMs},
			{"finalized", r.FinalizedFromMs, r.FinalizedToMs},
		}
		for _, w := range windows {
			if w.from != nil && *w.from < 0 {
				return invalid(w.name+"_from_ms", "must be >= 0")
			}
			if w.to != nil && *w.to < 0 {
				return invalid(w.name+"_to_ms", "must be >= 0")
			}
			if w.from != nil && w.to != nil && *w.from > *w.to {
				return invalid(w.name+"_from_ms", "must not be after %s_to_ms", w.name)
			}
		}
		if err := first(
			declared("sort_by", r.GetSortBy(), "unknown sort field"),
			declared("sort_dir", r.GetSortDir(), "unknown sort direction"),
		); err != nil {
			return err
		}
		if len(r.GetInclude()) > 8 {
			return invalid("include", "at most 8 tokens")
		}
		return first(
			Limit("limit", &r.Limit, 200),
			Cursor("cursor", r.GetCursor()),
		)
	})
	register(func(r *cyclesv1.DecideRequest) error {
		return first(
			spend(r.GetIdempotencyKey(), r.GetSubject(), r.GetAction(), "estimate", r.GetEstimate()),
			Metadata("metadata", r.GetMetadata()),
		)
	})
	register(func(r *cyclesv1.CreateEventRequest) error {
		if err := first(
			spend(r.GetIdempotencyKey(), r.GetSubject(), r.GetAction(), "actual", r.GetActual()),
			Policy("overage_policy", r.GetOveragePolicy()),
			Metrics("metrics", r.GetMetrics()),
		); err != nil {
			return err
		}
		if r.ClientTimeMs != nil {
			if err := NonNegative("client_time_ms", r.GetClientTimeMs()); err != nil {
				return err
			}
		}
		return Metadata("metadata", r.GetMetadata())
	})
	register(func(r *cyclesv1.GetBalancesRequest) error {
		vals := []string{r.GetTenant(), r.GetWorkspace(), r.GetApp(), r.GetWorkflow(), r.GetAgent(), r.GetToolset()}
		any := false
		for _, v := range vals {
			any = any || v != ""
		}
		if !any {
			return invalid("subject filters", "at least one of tenant, workspace, app, workflow, agent, toolset is required")
		}
		return first(
			filterValues(vals...),
			OptionalUnit("unit", r.GetUnit()),
			Limit("limit", &r.Limit, 200),
			Cursor("cursor", r.GetCursor()),
		)
	})
}

// spend checks the fields every spending request has, in the order a client
// reads its errors: idempotency key, subject, action, then the amount.
func spend(key string, subj *cyclesv1.Subject, action *cyclesv1.Action, amountField string, amount *cyclesv1.Amount) error {
	return first(
		IdempotencyKey("idempotency_key", key),
		Subject("subject", subj),
		Action("action", action),
		Amount(amountField, amount),
	)
}

// filterValues checks optional subject filters (tenant..toolset order).
func filterValues(vals ...string) error {
	for i, v := range vals {
		if v != "" && !scope.ValidValue(v) {
			return invalid(scope.Levels[i], "must match [a-zA-Z0-9_.-]{1,%d}", scope.MaxValueLen)
		}
	}
	return nil
}
