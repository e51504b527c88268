package admin

import (
	"context"
	"reflect"
	"sort"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/test/redistest"
)

// listAllTenants follows next_cursor from the first page to the end and
// returns the ids in order and the page sizes.
func (e *env) listAllTenants(req *cyclesv1.ListTenantsRequest) (ids []string, pages []int) {
	e.t.Helper()
	ts, pages := listAll(e, req, e.svc.ListTenants, (*cyclesv1.ListTenantsResponse).GetTenants)
	for _, t := range ts {
		ids = append(ids, t.GetTenantId())
	}
	return ids, pages
}

// ListTenants pages the registry in id order, exactly once each, skips a
// registry entry without a record, and filters by status and search text
// (possibly with short pages, never losing a match).
func TestListTenants(t *testing.T) {
	// A private server: the registry is global, other tests' tenants would
	// show up in it.
	e := newEnvOn(t, redistest.Start(t).Client(t))
	var all, suspended, beta []string
	for i, name := range []string{"Alpha", "Beta One", "Gamma", "beta two", "Delta", "Epsilon", "Zeta"} {
		id := newTenantID(t)
		mustCall(t, e.ctx, &cyclesv1.CreateTenantRequest{TenantId: id, Name: name}, e.svc.CreateTenant)
		all = append(all, id)
		if i%3 == 0 {
			mustCall(t, e.ctx, &cyclesv1.UpdateTenantRequest{TenantId: id, Status: cyclesv1.TenantStatus_TENANT_STATUS_SUSPENDED}, e.svc.UpdateTenant)
			suspended = append(suspended, id)
		}
		if strings.Contains(strings.ToLower(name), "beta") {
			beta = append(beta, id)
		}
	}
	// A registry entry whose record was never written.
	if err := e.rdb.ZAdd(context.Background(), keys.Tenants, redisZ("t-000000000000")).Err(); err != nil {
		t.Fatal(err)
	}
	for _, l := range [][]string{all, suspended, beta} {
		sort.Strings(l)
	}

	ids, pages := e.listAllTenants(&cyclesv1.ListTenantsRequest{Limit: 3})
	if !reflect.DeepEqual(ids, all) {
		t.Fatalf("listed %v, want %v", ids, all)
	}
	for _, n := range pages {
		if n > 3 {
			t.Fatalf("page sizes %v exceed the limit", pages)
		}
	}
	first := mustCall(t, e.ctx, &cyclesv1.ListTenantsRequest{}, e.svc.ListTenants)
	if len(first.GetTenants()) != len(all) || first.GetHasMore() || first.GetTenants()[0].GetName() == "" {
		t.Fatalf("default page: %v", first)
	}
	if ids, _ := e.listAllTenants(&cyclesv1.ListTenantsRequest{Status: cyclesv1.TenantStatus_TENANT_STATUS_SUSPENDED, Limit: 1}); !reflect.DeepEqual(ids, suspended) {
		t.Fatalf("suspended: %v, want %v", ids, suspended)
	}
	if ids, _ := e.listAllTenants(&cyclesv1.ListTenantsRequest{Search: "BETA", Limit: 2}); !reflect.DeepEqual(ids, beta) {
		t.Fatalf("search: %v, want %v", ids, beta)
	}
	if ids, _ := e.listAllTenants(&cyclesv1.ListTenantsRequest{Search: "nobody"}); len(ids) != 0 {
		t.Fatalf("search nobody: %v", ids)
	}

	for _, req := range []*cyclesv1.ListTenantsRequest{
		{Cursor: "not a cursor"},
		{Cursor: "QUJD"}, // base64 of "ABC": not a tenant id
		{Limit: -1},
		{Status: 9},
		{Search: strings.Repeat("x", 129)},
	} {
		_, err := call(e.ctx, req, e.svc.ListTenants)
		wantRefused(t, err, codes.InvalidArgument, apierr.InvalidRequest)
	}
}
