package admin

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"testing"

	"google.golang.org/grpc/codes"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/test/redistest"
)

// Without tenant_id (the admin key), ListBudgets walks every tenant in
// tenant_id order, then each tenant's budgets in index order, each budget
// once across pages, skipping registry ids without a record, and bounds the
// tenants one call visits.
func TestListBudgetsAcrossTenants(t *testing.T) {
	e := newEnvOn(t, redistest.Start(t).Client(t)) // a private registry
	type bk struct{ tenant, scope, unit string }
	var want []bk
	for _, n := range []int{2, 0, 3} {
		id := e.createTenant()
		for i := 0; i < n; i++ {
			sp := "tenant:" + id
			if i > 0 {
				sp += fmt.Sprintf("/workspace:w%d", i)
			}
			for _, u := range []cyclesv1.Unit{cyclesv1.Unit_UNIT_TOKENS, cyclesv1.Unit_UNIT_CREDITS} {
				mustCall(t, e.ctx, &cyclesv1.CreateBudgetRequest{TenantId: id, ScopePath: sp, Unit: u, Allocated: 10}, e.svc.CreateBudget)
				want = append(want, bk{id, sp, u.String()})
			}
		}
	}
	if err := e.rdb.ZAdd(context.Background(), keys.Tenants, redisZ("t-000000000000")).Err(); err != nil {
		t.Fatal(err)
	}
	sort.SliceStable(want, func(i, j int) bool { return want[i].tenant < want[j].tenant })
	got := func(req *cyclesv1.ListBudgetsRequest) []bk {
		var out []bk
		bs, _ := listAll(e, req, e.svc.ListBudgets, (*cyclesv1.ListBudgetsResponse).GetBudgets)
		for _, b := range bs {
			out = append(out, bk{b.GetTenantId(), b.GetScopePath(), b.GetUnit().String()})
		}
		return out
	}
	all := got(&cyclesv1.ListBudgetsRequest{Limit: 3})
	if len(all) != len(want) {
		t.Fatalf("listed %d budgets, want %d: %v", len(all), len(want), all)
	}
	seen := map[bk]bool{}
	for i, b := range all {
		if seen[b] {
			t.Fatalf("%v listed twice", b)
		}
		seen[b] = true
		if b.tenant != want[i].tenant {
			t.Fatalf("row %d is of tenant %s, want %s (tenant order)", i, b.tenant, want[i].tenant)
		}
	}
	for _, b := range want {
		if !seen[b] {
			t.Fatalf("%v not listed", b)
		}
	}
	if tokens := got(&cyclesv1.ListBudgetsRequest{Unit: cyclesv1.Unit_UNIT_TOKENS, Limit: 1}); len(tokens) != len(want)/2 {
		t.Fatalf("TOKENS budgets: %d, want %d", len(tokens), len(want)/2)
	}
	if !reflect.DeepEqual(got(&cyclesv1.ListBudgetsRequest{}), all) {
		t.Fatal("one default page differs from the paged listing")
	}
	// Cursor kinds do not mix; a scope prefix without tenant_id lists the
	// tenant it names, and one that names none is refused.
	one := mustCall(t, e.ctx, &cyclesv1.ListBudgetsRequest{Limit: 1}, e.svc.ListBudgets)
	_, err := call(e.ctx, &cyclesv1.ListBudgetsRequest{TenantId: want[0].tenant, Cursor: one.GetNextCursor()}, e.svc.ListBudgets)
	wantRefused(t, err, codes.InvalidArgument, apierr.InvalidRequest)
	if l := mustCall(t, e.ctx, &cyclesv1.ListBudgetsRequest{ScopePrefix: want[0].scope}, e.svc.ListBudgets); len(l.GetBudgets()) == 0 ||
		l.GetBudgets()[0].GetTenantId() != want[0].tenant {
		t.Fatalf("prefix %s without tenant_id listed %v", want[0].scope, l.GetBudgets())
	}
	_, err = call(e.ctx, &cyclesv1.ListBudgetsRequest{ScopePrefix: "workspace:w"}, e.svc.ListBudgets)
	wantRefused(t, err, codes.InvalidArgument, apierr.InvalidRequest)

	// 101 budget-less tenants ahead of the rest ("a-" ids sort first).
	for i := 0; i < walkTenantsPerCall+1; i++ {
		mustCall(t, e.ctx, &cyclesv1.CreateTenantRequest{TenantId: fmt.Sprintf("a-%03d", i), Name: "empty"}, e.svc.CreateTenant)
	}
	first := mustCall(t, e.ctx, &cyclesv1.ListBudgetsRequest{}, e.svc.ListBudgets)
	if len(first.GetBudgets()) != 0 || !first.GetHasMore() {
		t.Fatalf("first call after %d empty tenants: %d budgets, has_more %v", walkTenantsPerCall, len(first.GetBudgets()), first.GetHasMore())
	}
	if n := len(got(&cyclesv1.ListBudgetsRequest{})); n != len(want) {
		t.Fatalf("after the empty tenants: %d budgets, want %d", n, len(want))
	}
}
