package cycleshttp

import (
	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
)

// Bulk actions (OperatorService on gRPC): POST /v1/admin/tenants/bulk-action
// and POST /v1/admin/budgets/bulk-action.

// spentOnlyToReset: spent belongs to RESET_SPENT only, and the wire ignores
// it with any other action (rather than failing every row).
func spentOnlyToReset(req *cyclesv1.BulkActionBudgetsRequest) error {
	if req.GetAction() != cyclesv1.FundingOperation_FUNDING_OPERATION_RESET_SPENT {
		req.Spent = nil
	}
	return nil
}

// bulkShape is the spec's TenantBulkActionResponse and
// BudgetBulkActionResponse (one shape: the two answers share their fields).
var bulkShape = shapeOf("action", "total_matched", "succeeded", "failed", "skipped", "idempotency_key").
	nest("succeeded", bulkRow).nest("failed", bulkRow).nest("skipped", bulkRow)

var bulkRow = shapeOf("id", "error_code?", "message?", "reason?")
