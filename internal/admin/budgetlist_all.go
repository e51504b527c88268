package admin

import (
	"context"
	"encoding/base64"
	"strings"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/scope"
	"github.com/cyclesgo/cycles-go/internal/sweeper"
)

// budgetListTenantsPerCall bounds the tenants one all-tenant ListBudgets
// call visits (one script each), so its work is bounded however many
// tenants have no matching budget; the page may then be empty with
// has_more set.
const budgetListTenantsPerCall = 100

// listAllBudgets pages every tenant's budgets (the admin key without
// tenant_id): tenants in tenant_id order (the registry, as the sweeper
// walks it), each tenant's budgets in index order. The cursor is
// "<tenant>|<last member>" inside a tenant, "<tenant>>" after a whole one.
func (s *Service) listAllBudgets(ctx context.Context, req *cyclesv1.ListBudgetsRequest) (*cyclesv1.ListBudgetsResponse, error) {
	unit := ""
	if req.GetUnit() != cyclesv1.Unit_UNIT_UNSPECIFIED {
		if unit = scope.UnitKey(req.GetUnit()); unit == "" {
			return nil, apierr.Invalid("unit", "unknown unit")
		}
	}
	limit := pageLimit(req.GetLimit(), DefaultListLimit, MaxListLimit)
	var queue []string
	regAfter, after := "", ""
	if c := req.GetCursor(); c != "" {
		raw, err := base64.RawURLEncoding.DecodeString(c)
		cur := string(raw)
		t, m, inTenant := strings.Cut(cur, "|")
		switch {
		case err != nil:
			return nil, apierr.Invalid("cursor", "is not a cursor of this listing")
		case inTenant && auth.ValidTenantID(t) && (m == "" || strings.HasPrefix(m, "tenant:"+t)):
			queue, regAfter = []string{t}, t
			if m != "" {
				after = m
			}
		case !inTenant && strings.HasSuffix(cur, ">") && auth.ValidTenantID(strings.TrimSuffix(cur, ">")):
			regAfter = strings.TrimSuffix(cur, ">")
		default:
			return nil, apierr.Invalid("cursor", "is not a cursor of this listing")
		}
	}
	resp := &cyclesv1.ListBudgetsResponse{}
	next := func(c string) *cyclesv1.ListBudgetsResponse {
		resp.HasMore, resp.NextCursor = true, base64.RawURLEncoding.EncodeToString([]byte(c))
		return resp
	}
	for visited := 0; ; visited++ {
		if len(queue) == 0 {
			var reg struct {
				Tenants jsonList[string] `json:"tenants"`
			}
			if err := s.exec.RunInto(ctx, &reg, sweeper.TenantsScript, []string{keys.Tenants}, regAfter, budgetListTenantsPerCall); err != nil {
				return nil, err
			}
			if len(reg.Tenants) == 0 {
				return resp, nil
			}
			queue, regAfter = reg.Tenants, reg.Tenants[len(reg.Tenants)-1]
		}
		t := queue[0]
		if visited == budgetListTenantsPerCall {
			return next(t + "|" + after), nil
		}
		queue = queue[1:]
		page, err := s.budgetPage(ctx, t, "", unit, after, limit-len(resp.Budgets))
		if err != nil {
			return nil, err
		}
		resp.Budgets = append(resp.Budgets, page.budgets...)
		if page.more {
			if page.last == "" {
				page.last = after
			}
			return next(t + "|" + page.last), nil
		}
		after = ""
		if len(resp.Budgets) == limit {
			return next(t + ">"), nil
		}
	}
}
