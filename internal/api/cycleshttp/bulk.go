package cycleshttp

import (
	"encoding/json"

	"google.golang.org/protobuf/proto"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
)

// Bulk actions (OperatorService on gRPC): POST /v1/admin/tenants/bulk-action
// and POST /v1/admin/budgets/bulk-action.

var (
	tenantBulkNames  = enumNames(cyclesv1.TenantBulkAction(0).Descriptor())
	tenantBulkValues = enumValues(tenantBulkNames)
	budgetStatusVals = enumValues(budgetStatusNames)
)

func (a *API) bulkRoutes() []endpoint {
	op, offBulk := a.op, off("bulk actions are not enabled on this server")
	return []endpoint{
		on(a, "POST /v1/admin/tenants/bulk-action", cyclesv1.OperatorService_BulkActionTenants_FullMethodName,
			via(op, cyclesv1.OperatorServiceServer.BulkActionTenants), jsonBody(built((*tenantBulkIn).proto)),
			shaped[*cyclesv1.BulkActionTenantsResponse](bulkShape), offBulk),
		on(a, "POST /v1/admin/budgets/bulk-action", cyclesv1.OperatorService_BulkActionBudgets_FullMethodName,
			via(op, cyclesv1.OperatorServiceServer.BulkActionBudgets), jsonBody(built((*budgetBulkIn).proto)),
			shaped[*cyclesv1.BulkActionBudgetsResponse](bulkShape), offBulk),
	}
}

// built adapts a wire type that builds its whole request.
func built[In any, Req proto.Message](build func(*In) (Req, error)) func(*In, Req) error {
	return func(in *In, req Req) error {
		p, err := build(in)
		if err != nil {
			return err
		}
		proto.Merge(req, p)
		return nil
	}
}

type tenantBulkIn struct {
	Filter struct {
		Status         *string `json:"status"`
		ParentTenantID *string `json:"parent_tenant_id"`
		ObserveMode    *string `json:"observe_mode"` // v0.1.26; ignored, as the spec allows
		Search         *string `json:"search"`
	} `json:"filter"`
	Action         string `json:"action"`
	ExpectedCount  *int64 `json:"expected_count"`
	IdempotencyKey string `json:"idempotency_key"`
}

func (in *tenantBulkIn) proto() (*cyclesv1.BulkActionTenantsRequest, error) {
	req := &cyclesv1.BulkActionTenantsRequest{Filter: &cyclesv1.TenantBulkFilter{}, ExpectedCount: in.ExpectedCount,
		IdempotencyKey: in.IdempotencyKey}
	if in.Filter.ParentTenantID != nil {
		return nil, apierr.Invalid("filter.parent_tenant_id", "tenant hierarchies are not supported by cyclesd")
	}
	if in.Filter.Status != nil {
		v, err := parseEnum("filter.status", *in.Filter.Status, tenantStatusValues)
		if err != nil {
			return nil, err
		}
		req.Filter.Status = cyclesv1.TenantStatus(v)
	}
	if in.Filter.Search != nil {
		req.Filter.Search = *in.Filter.Search
	}
	v, err := parseEnum("action", in.Action, tenantBulkValues)
	if err != nil {
		return nil, err
	}
	req.Action = cyclesv1.TenantBulkAction(v)
	return req, nil
}

type budgetBulkIn struct {
	Filter struct {
		TenantID       string       `json:"tenant_id"`
		ScopePrefix    string       `json:"scope_prefix"`
		Unit           *string      `json:"unit"`
		Status         *string      `json:"status"`
		OverLimit      *bool        `json:"over_limit"`
		HasDebt        *bool        `json:"has_debt"`
		UtilizationMin *json.Number `json:"utilization_min"`
		UtilizationMax *json.Number `json:"utilization_max"`
		Search         string       `json:"search"`
	} `json:"filter"`
	Action         string    `json:"action"`
	Amount         *amountIn `json:"amount"`
	Spent          *amountIn `json:"spent"`
	Reason         string    `json:"reason"`
	ExpectedCount  *int64    `json:"expected_count"`
	IdempotencyKey string    `json:"idempotency_key"`
}

func (in *budgetBulkIn) proto() (*cyclesv1.BulkActionBudgetsRequest, error) {
	f := in.Filter
	req := &cyclesv1.BulkActionBudgetsRequest{Filter: &cyclesv1.BudgetBulkFilter{TenantId: f.TenantID, ScopePrefix: f.ScopePrefix,
		OverLimit: f.OverLimit, HasDebt: f.HasDebt, Search: f.Search}, Reason: in.Reason, ExpectedCount: in.ExpectedCount,
		IdempotencyKey: in.IdempotencyKey}
	if f.Unit != nil {
		v, err := parseEnum("filter.unit", *f.Unit, unitValues)
		if err != nil {
			return nil, err
		}
		req.Filter.Unit = cyclesv1.Unit(v)
	}
	if f.Status != nil {
		v, err := parseEnum("filter.status", *f.Status, budgetStatusVals)
		if err != nil {
			return nil, err
		}
		req.Filter.Status = cyclesv1.BudgetStatus(v)
	}
	if f.UtilizationMin != nil {
		req.Filter.UtilizationMin = f.UtilizationMin.String()
	}
	if f.UtilizationMax != nil {
		req.Filter.UtilizationMax = f.UtilizationMax.String()
	}
	v, err := parseEnum("action", in.Action, fundingValues)
	if err != nil {
		return nil, err
	}
	req.Action = cyclesv1.FundingOperation(v)
	if in.Amount == nil {
		return nil, apierr.Invalid("amount", "is required")
	}
	if req.Amount, err = in.Amount.proto("amount"); err != nil {
		return nil, err
	}
	if in.Spent != nil && req.Action == cyclesv1.FundingOperation_FUNDING_OPERATION_RESET_SPENT {
		s, err := in.Spent.proto("spent")
		if err != nil {
			return nil, err
		}
		req.Spent = &s.Amount
	}
	return req, nil
}

// bulkShape is the spec's TenantBulkActionResponse and
// BudgetBulkActionResponse (one shape: the two answers share their fields).
var bulkShape = shapeOf("action", "total_matched", "succeeded", "failed", "skipped", "idempotency_key").
	nest("succeeded", bulkRow).nest("failed", bulkRow).nest("skipped", bulkRow)

var bulkRow = shapeOf("id", "error_code?", "message?", "reason?")
