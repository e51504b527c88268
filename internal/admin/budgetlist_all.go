package admin

import (
	"context"
	"strings"

	pagecursor "github.com/cyclesgo/cycles-go/internal/cursor"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/scope"
)

// listAllBudgets pages every tenant's budgets (the admin key without
// tenant_id) through walkTenants: tenants in tenant_id order, each tenant's
// budgets in index order.
func (s *Service) listAllBudgets(ctx context.Context, req *cyclesv1.ListBudgetsRequest) (*cyclesv1.ListBudgetsResponse, error) {
	unit := ""
	if req.GetUnit() != cyclesv1.Unit_UNIT_UNSPECIFIED {
		if unit = scope.UnitKey(req.GetUnit()); unit == "" {
			return nil, apierr.Invalid("unit", "unknown unit")
		}
	}
	cursor, err := pagecursor.Decode("cursor", req.GetCursor())
	if err != nil {
		return nil, err
	}
	budgets, next, err := walkAll(ctx, s, cursor, pageLimit(req.GetLimit(), DefaultListLimit, MaxListLimit),
		func(t, m string) bool { return strings.HasPrefix(m, "tenant:"+t) },
		func(ctx context.Context, t, after string, room int) (*scanPage[*cyclesv1.Budget], error) {
			return s.budgetPage(ctx, t, "", unit, after, room)
		})
	if err != nil {
		return nil, err
	}
	return &cyclesv1.ListBudgetsResponse{Budgets: budgets, HasMore: next != "", NextCursor: next}, nil
}
