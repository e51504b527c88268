package admin

import (
	"context"
	"strings"

	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
	pagecursor "github.com/cyclesgo/cycles-go/internal/cursor"
	"github.com/cyclesgo/cycles-go/internal/sweeper"
)

// walkTenantsPerCall bounds the tenants one all-tenant listing call visits
// (one script each), so a call's work is bounded however many tenants have
// no matching row; the page may then be empty with has_more set.
const walkTenantsPerCall = 100

// tenantPage appends at most room rows of tenant t that follow the member
// after ("" = t's first) and reports the last member it consumed and whether
// more may follow in t.
type tenantPage func(ctx context.Context, t, after string, room int) (added int, last string, more bool, err error)

// walkAll runs walkTenants with page, collecting every tenant's items; it
// returns them and the encoded next cursor ("" when the walk is done). A nil
// page is a tenant with nothing to list.
func walkAll[T any](ctx context.Context, s *Service, cursor string, limit int, inner func(t, m string) bool,
	page func(ctx context.Context, t, after string, room int) (*scanPage[T], error)) ([]T, string, error) {
	var items []T
	next, err := s.walkTenants(ctx, cursor, limit, inner, func(ctx context.Context, t, after string, room int) (int, string, bool, error) {
		p, err := page(ctx, t, after, room)
		if err != nil || p == nil {
			return 0, "", false, err
		}
		items = append(items, p.items...)
		return len(p.items), p.last, p.more, nil
	})
	if err != nil || next == "" {
		return items, "", err
	}
	return items, pagecursor.Encode(next), nil
}

// walkTenants is the all-tenant listing of the admin plane (keys, budgets
// without tenant_id): the tenant registry in tenant_id order (sweeper/tenants,
// as the sweeper walks it), each tenant's rows in turn through page, until
// limit rows or walkTenantsPerCall tenants. cursor is the decoded cursor:
// "T|M" (continue in tenant T after member M; M empty = T's first) or "T>"
// (continue with the tenants after T); inner says whether M is a member of
// T's listing. It returns the next cursor, "" when the walk is done.
func (s *Service) walkTenants(ctx context.Context, cursor string, limit int, inner func(t, m string) bool, page tenantPage) (string, error) {
	var queue []string
	regAfter, after := "", ""
	if cursor != "" {
		t, m, inTenant := strings.Cut(cursor, "|")
		switch {
		case inTenant && auth.ValidTenantID(t) && (m == "" || inner(t, m)):
			queue, regAfter, after = []string{t}, t, m
		case !inTenant && strings.HasSuffix(cursor, ">") && auth.ValidTenantID(strings.TrimSuffix(cursor, ">")):
			regAfter = strings.TrimSuffix(cursor, ">")
		default:
			return "", apierr.Invalid("cursor", "is not a cursor of this listing")
		}
	}
	rows := 0
	for visited := 0; ; visited++ {
		if len(queue) == 0 {
			reg, err := sweeper.TenantPage(ctx, s.exec, regAfter, walkTenantsPerCall)
			if err != nil {
				return "", err
			}
			if len(reg) == 0 {
				return "", nil
			}
			queue, regAfter = reg, reg[len(reg)-1]
		}
		t := queue[0]
		if visited == walkTenantsPerCall {
			return t + "|" + after, nil
		}
		queue = queue[1:]
		added, last, more, err := page(ctx, t, after, limit-rows)
		if err != nil {
			return "", err
		}
		rows += added
		if more {
			if last == "" {
				last = after
			}
			return t + "|" + last, nil
		}
		after = ""
		if rows == limit {
			return t + ">", nil
		}
	}
}
