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
	var cursor string
	if c := req.GetCursor(); c != "" {
		raw, err := pagecursor.Decode("cursor", c)
		if err != nil {
			return nil, err
		}
		cursor = raw
	}
	resp := &cyclesv1.ListBudgetsResponse{}
	next, err := s.walkTenants(ctx, cursor, pageLimit(req.GetLimit(), DefaultListLimit, MaxListLimit),
		func(t, m string) bool { return strings.HasPrefix(m, "tenant:"+t) },
		func(ctx context.Context, t, after string, room int) (int, string, bool, error) {
			page, err := s.budgetPage(ctx, t, "", unit, after, room)
			if err != nil {
				return 0, "", false, err
			}
			resp.Budgets = append(resp.Budgets, page.items...)
			return len(page.items), page.last, page.more, nil
		})
	if err != nil {
		return nil, err
	}
	if next != "" {
		resp.HasMore, resp.NextCursor = true, pagecursor.Encode(next)
	}
	return resp, nil
}
