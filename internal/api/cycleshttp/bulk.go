package cycleshttp

import (
	"net/http"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
)

// Bulk actions (OperatorService on gRPC): POST /v1/admin/tenants/bulk-action
// and POST /v1/admin/budgets/bulk-action.

func (a *API) bulkRoutes() []endpoint {
	op, offBulk := a.svc.Operator, off("bulk actions are not enabled on this server")
	return []endpoint{
		on(a, "POST /v1/admin/tenants/bulk-action", via(op, cyclesv1.OperatorServiceServer.BulkActionTenants), protoJSON,
			bulkShape, offBulk),
		on(a, "POST /v1/admin/budgets/bulk-action", via(op, cyclesv1.OperatorServiceServer.BulkActionBudgets), budgetBulkBody,
			bulkShape, offBulk),
	}
}

// budgetBulkBody reads the body; spent belongs to RESET_SPENT only, and the
// wire ignores it with any other action (rather than failing every row).
func budgetBulkBody(a *API, w http.ResponseWriter, r *http.Request, req *cyclesv1.BulkActionBudgetsRequest) error {
	err := protoJSON(a, w, r, req)
	if req.GetAction() != cyclesv1.FundingOperation_FUNDING_OPERATION_RESET_SPENT {
		req.Spent = nil
	}
	return err
}

// bulkShape is the spec's TenantBulkActionResponse and
// BudgetBulkActionResponse (one shape: the two answers share their fields).
var bulkShape = shapeOf("action", "total_matched", "succeeded", "failed", "skipped", "idempotency_key").
	nest("succeeded", bulkRow).nest("failed", bulkRow).nest("skipped", bulkRow)

var bulkRow = shapeOf("id", "error_code?", "message?", "reason?")
