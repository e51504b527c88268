package cycleshttp

import (
	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
)

// Bulk actions (OperatorService on gRPC): POST /v1/admin/tenants/bulk-action
// and POST /v1/admin/budgets/bulk-action.

func (a *API) bulkRoutes() []endpoint {
	op, offBulk := a.svc.Operator, off("bulk actions are not enabled on this server")
	return []endpoint{
		on(a, "POST /v1/admin/tenants/bulk-action", via(op, cyclesv1.OperatorServiceServer.BulkActionTenants), protoJSON,
			bulkShape, offBulk),
		on(a, "POST /v1/admin/budgets/bulk-action", via(op, cyclesv1.OperatorServiceServer.BulkActionBudgets), protoJSON,
			bulkShape, offBulk),
	}
}

// bulkShape is the spec's TenantBulkActionResponse and
// BudgetBulkActionResponse (one shape: the two answers share their fields).
var bulkShape = shapeOf("action", "total_matched", "succeeded", "failed", "skipped", "idempotency_key").
	nest("succeeded", bulkRow).nest("failed", bulkRow).nest("skipped", bulkRow)

var bulkRow = shapeOf("id", "error_code?", "message?", "reason?")
