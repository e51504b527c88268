package validate

import (
	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
)

// bulkMaxKey bounds a bulk action's idempotency key (the spec's 128).
const bulkMaxKey = 128

// OperatorService request validators: the payload is checked before any row
// is matched or counted.
func init() {
	register(func(r *cyclesv1.BulkActionTenantsRequest) error {
		f := r.GetFilter()
		switch {
		case f.GetStatus() == cyclesv1.TenantStatus_TENANT_STATUS_UNSPECIFIED && f.GetSearch() == "":
			return invalid("filter", "must name a status or a search (an empty filter would select every tenant)")
		case len(f.GetSearch()) > 128:
			return invalid("filter.search", "must be at most 128 characters")
		case r.GetAction() == cyclesv1.TenantBulkAction_TENANT_BULK_ACTION_UNSPECIFIED:
			return invalid("action", "must be SUSPEND, REACTIVATE or CLOSE")
		case r.ExpectedCount != nil && r.GetExpectedCount() < 0:
			return invalid("expected_count", "must be >= 0")
		}
		return ID("idempotency_key", r.GetIdempotencyKey(), bulkMaxKey)
	})
	register(func(r *cyclesv1.BulkActionBudgetsRequest) error {
		f := r.GetFilter()
		if err := TenantID("filter.tenant_id", f.GetTenantId()); err != nil {
			return err
		}
		if f.GetScopePrefix() != "" {
			if err := AdminScopePath("filter.scope_prefix", f.GetScopePrefix()); err != nil {
				return err
			}
		}
		switch {
		case len(f.GetSearch()) > 128:
			return invalid("filter.search", "must be at most 128 characters")
		case r.GetAction() == cyclesv1.FundingOperation_FUNDING_OPERATION_UNSPECIFIED:
			return invalid("action", "must be CREDIT, DEBIT, RESET, RESET_SPENT or REPAY_DEBT")
		case r.GetAmount() == nil || r.GetAmount().GetUnit() == cyclesv1.Unit_UNIT_UNSPECIFIED:
			return invalid("amount", "is required, with its unit")
		case r.GetAmount().GetAmount() < 0:
			return invalid("amount", "must be >= 0")
		case r.Spent != nil && r.GetSpent() < 0:
			return invalid("spent", "must be >= 0")
		case r.ExpectedCount != nil && r.GetExpectedCount() < 0:
			return invalid("expected_count", "must be >= 0")
		}
		return first(
			Text("reason", r.GetReason(), 512),
			ID("idempotency_key", r.GetIdempotencyKey(), bulkMaxKey),
		)
	})
}
