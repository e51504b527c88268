package ledger_test

import (
	"sort"
	"testing"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/ledger"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
)

func ids(rs []*cyclesv1.Reservation) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.GetReservationId()
	}
	return out
}

// listAll pages through a listing and returns every row.
func (e *env) listAll(req *cyclesv1.ListReservationsRequest) []*cyclesv1.Reservation {
	e.t.Helper()
	var out []*cyclesv1.Reservation
	for i := 0; i < 100; i++ {
		resp, err := e.l.List(ctx, e.tenant, req)
		if err != nil {
			e.t.Fatalf("list: %v", err)
		}
		out = append(out, resp.GetReservations()...)
		if resp.GetHasMore() != (resp.GetNextCursor() != "") {
			e.t.Fatal("has_more must be true iff next_cursor is set")
		}
		if !resp.GetHasMore() {
			return out
		}
		req.Cursor = resp.GetNextCursor()
	}
	e.t.Fatal("listing did not end")
	return nil
}

func TestListReservations(t *testing.T) {
	e := newFundedEnv(t, 100_000)
	type made struct {
		id      string
		created int64
		expires int64
	}
	var all []made
	mk := func(key string, subj *cyclesv1.Subject, ttl int64) string {
		r := e.mustReserve(key, 10, withSubject(subj), withTTL(ttl, 0))
		all = append(all, made{r.ReservationId, r.GetExpiresAtMs() - ttl, r.GetExpiresAtMs()})
		return r.ReservationId
	}
	a1 := mk("a1", &cyclesv1.Subject{Workspace: "prod", Agent: "alpha"}, 50_000)
	a2 := mk("a2", &cyclesv1.Subject{Workspace: "prod", Agent: "beta"}, 40_000)
	a3 := mk("a3", &cyclesv1.Subject{Workspace: "prod2", Agent: "alpha"}, 30_000)
	a4 := mk("a4", &cyclesv1.Subject{Workspace: "Prod"}, 20_000)
	a5 := mk("a5", &cyclesv1.Subject{App: "x"}, 10_000)
	if _, err := e.commit(a1, "c", 5); err != nil {
		t.Fatal(err)
	}
	if _, err := e.release(a2, "r"); err != nil {
		t.Fatal(err)
	}

	// Default order: created_at descending (ties by id, reversed).
	got := e.listAll(&cyclesv1.ListReservationsRequest{Limit: 2})
	want := append([]made(nil), all...)
	sort.SliceStable(want, func(i, j int) bool {
		if want[i].created != want[j].created {
			return want[i].created > want[j].created
		}
		return want[i].id > want[j].id
	})
	if len(got) != 5 {
		t.Fatalf("paged listing returned %d rows", len(got))
	}
	for i := range want {
		if got[i].GetReservationId() != want[i].id {
			t.Fatalf("row %d = %s, want %s (created desc)", i, got[i].GetReservationId(), want[i].id)
		}
	}
	// Expires ascending.
	got = e.listAll(&cyclesv1.ListReservationsRequest{Limit: 3, SortBy: cyclesv1.ReservationSortField_RESERVATION_SORT_FIELD_EXPIRES_AT,
		SortDir: cyclesv1.SortDirection_SORT_DIRECTION_ASC})
	if g := ids(got); len(g) != 5 || g[0] != a5 || g[1] != a4 || g[2] != a3 || g[3] != a2 || g[4] != a1 {
		t.Fatalf("expires asc = %v", g)
	}

	filters := []struct {
		name string
		req  *cyclesv1.ListReservationsRequest
		want []string
	}{
		{"status", &cyclesv1.ListReservationsRequest{Status: cyclesv1.ReservationStatus_RESERVATION_STATUS_ACTIVE}, []string{a3, a4, a5}},
		{"exact workspace segment, case-insensitive", &cyclesv1.ListReservationsRequest{Workspace: "PROD"}, []string{a1, a2, a4}},
		{"workspace and agent", &cyclesv1.ListReservationsRequest{Workspace: "prod", Agent: "alpha"}, []string{a1}},
		{"idempotency key", &cyclesv1.ListReservationsRequest{IdempotencyKey: "a3"}, []string{a3}},
		{"finalized window excludes unfinalized rows", &cyclesv1.ListReservationsRequest{FinalizedFromMs: i64p(0)}, []string{a1, a2}},
		{"expires window", &cyclesv1.ListReservationsRequest{ExpiresFromMs: i64p(all[3].expires), ExpiresToMs: i64p(all[2].expires)}, []string{a3, a4}},
		{"created window", &cyclesv1.ListReservationsRequest{CreatedFromMs: i64p(0), CreatedToMs: i64p(1)}, nil},
		{"tenant filter equal to the caller", &cyclesv1.ListReservationsRequest{Tenant: e.tenant, App: "x"}, []string{a5}},
	}
	for _, f := range filters {
		g := ids(e.listAll(f.req))
		sort.Strings(g)
		w := append([]string(nil), f.want...)
		sort.Strings(w)
		if len(g) != len(w) {
			t.Fatalf("%s: got %v want %v", f.name, g, w)
		}
		for i := range g {
			if g[i] != w[i] {
				t.Fatalf("%s: got %v want %v", f.name, g, w)
			}
		}
	}

	// Projections: committed always, metadata only on request.
	rows := e.listAll(&cyclesv1.ListReservationsRequest{IdempotencyKey: "a1"})
	if rows[0].GetCommitted().GetAmount() != 5 || rows[0].FinalizedAtMs == nil || rows[0].GetMetadata() != nil {
		t.Fatalf("projection = %v", rows[0])
	}

	// Cursors are bound to their filters and sort.
	first, err := e.l.List(ctx, e.tenant, &cyclesv1.ListReservationsRequest{Limit: 1})
	if err != nil || !first.GetHasMore() {
		t.Fatalf("first page: %v %v", first, err)
	}
	_, err = e.l.List(ctx, e.tenant, &cyclesv1.ListReservationsRequest{Limit: 1, Workspace: "prod", Cursor: first.GetNextCursor()})
	wantCode(t, err, apierr.InvalidRequest)
	_, err = e.l.List(ctx, e.tenant, &cyclesv1.ListReservationsRequest{Limit: 1, Cursor: first.GetNextCursor(),
		SortDir: cyclesv1.SortDirection_SORT_DIRECTION_ASC})
	wantCode(t, err, apierr.InvalidRequest)
	_, err = e.l.List(ctx, e.tenant, &cyclesv1.ListReservationsRequest{Cursor: "!!not-a-cursor"})
	wantCode(t, err, apierr.InvalidRequest)
	_, err = e.l.List(ctx, e.tenant, &cyclesv1.ListReservationsRequest{Tenant: "someone-else"})
	wantCode(t, err, apierr.Forbidden)
	// include does not bind the cursor.
	if _, err := e.l.List(ctx, e.tenant, &cyclesv1.ListReservationsRequest{Limit: 1, Cursor: first.GetNextCursor(), Include: []string{"metadata"}}); err != nil {
		t.Fatalf("include with a cursor: %v", err)
	}
}

// A selective filter over many rows walks at most ScanBudget index entries
// per call: the page can be empty while has_more says to continue.
func TestListReservationsBoundedScan(t *testing.T) {
	e := newFundedEnv(t, 1_000_000)
	needle := e.mustReserve("needle", 1, withSubject(&cyclesv1.Subject{Agent: "needle"})).ReservationId
	for i := 0; i < ledger.ScanBudget+20; i++ {
		e.mustReserve("hay"+itoa(int64(i)), 1, withSubject(&cyclesv1.Subject{Agent: "hay"}))
	}
	page, err := e.l.List(ctx, e.tenant, &cyclesv1.ListReservationsRequest{Agent: "needle"})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.GetReservations()) != 0 || !page.GetHasMore() {
		t.Fatalf("first page: %d rows, has_more %v; want an empty page with has_more", len(page.GetReservations()), page.GetHasMore())
	}
	rows := e.listAll(&cyclesv1.ListReservationsRequest{Agent: "needle"})
	if len(rows) != 1 || rows[0].GetReservationId() != needle {
		t.Fatalf("needle = %v", ids(rows))
	}
}

func TestGetBalances(t *testing.T) {
	e := newEnv(t)
	for _, b := range []ledgertest.Budget{
		{Scope: e.scope(""), Allocated: 1000},
		{Scope: e.scope(""), Unit: "CREDITS", Allocated: 7},
		{Scope: e.scope("workspace:prod"), Allocated: 500},
		{Scope: e.scope("workspace:prod/agent:bot"), Allocated: 100},
		{Scope: e.scope("workspace:prod2"), Allocated: 50},
		{Scope: e.scope("workspace:prod/app:x/agent:bot"), Allocated: 10},
	} {
		e.budget(b)
	}
	e.mustReserve("k", 5, withSubject(&cyclesv1.Subject{Workspace: "prod", Agent: "bot"}))

	all := func(req *cyclesv1.GetBalancesRequest) []*cyclesv1.Balance {
		var out []*cyclesv1.Balance
		for {
			resp, err := e.l.Balances(ctx, e.tenant, req)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, resp.GetBalances()...)
			if !resp.GetHasMore() {
				return out
			}
			req.Cursor = resp.GetNextCursor()
		}
	}
	paths := func(bs []*cyclesv1.Balance) []string {
		out := make([]string, len(bs))
		for i, b := range bs {
			out[i] = b.GetScopePath() + "|" + b.GetAllocated().GetUnit().String()
		}
		return out
	}
	if got := all(&cyclesv1.GetBalancesRequest{Tenant: e.tenant, Limit: 2}); len(got) != 6 {
		t.Fatalf("tenant filter = %v", paths(got))
	}
	got := all(&cyclesv1.GetBalancesRequest{Workspace: "PROD"})
	if len(got) != 3 {
		t.Fatalf("workspace=PROD (exact segment) = %v", paths(got))
	}
	got = all(&cyclesv1.GetBalancesRequest{Agent: "bot"})
	if len(got) != 2 || got[0].GetScope() != "agent:bot" || got[0].GetReserved().GetAmount() != 5 || got[0].GetRemaining().GetAmount() != 95 {
		t.Fatalf("agent=bot = %v", got)
	}
	got = all(&cyclesv1.GetBalancesRequest{Tenant: e.tenant, Unit: cyclesv1.Unit_UNIT_CREDITS})
	if len(got) != 1 || got[0].GetAllocated().GetAmount() != 7 || got[0].GetAllocated().GetUnit() != cyclesv1.Unit_UNIT_CREDITS {
		t.Fatalf("unit filter = %v", got)
	}
	first, err := e.l.Balances(ctx, e.tenant, &cyclesv1.GetBalancesRequest{Tenant: e.tenant, Limit: 1})
	if err != nil || !first.GetHasMore() {
		t.Fatal(err)
	}
	_, err = e.l.Balances(ctx, e.tenant, &cyclesv1.GetBalancesRequest{Workspace: "prod", Limit: 1, Cursor: first.GetNextCursor()})
	wantCode(t, err, apierr.InvalidRequest)
	_, err = e.l.Balances(ctx, e.tenant, &cyclesv1.GetBalancesRequest{Tenant: "someone-else"})
	wantCode(t, err, apierr.Forbidden)
}

// A listing never writes (list.lua is no-writes, so it answers on a full
// Redis): an index entry whose record outlived its retention is skipped and
// left for reserve.lua's bounded trim.
func TestListReservationsSkipsGoneRecordsWithoutWriting(t *testing.T) {
	e := newFundedEnv(t, 1_000)
	a := e.mustReserve("a", 1).ReservationId
	b := e.mustReserve("b", 1).ReservationId
	c := e.mustReserve("c", 1).ReservationId
	if _, err := e.release(b, "rb"); err != nil {
		t.Fatal(err)
	}
	tk := keys.Tenant(e.tenant)
	// b's retention ended: its hash is gone, its index entries remain.
	if err := e.c.Del(ctx, tk.Reservation(b)).Err(); err != nil {
		t.Fatal(err)
	}
	for _, by := range []cyclesv1.ReservationSortField{cyclesv1.ReservationSortField_RESERVATION_SORT_FIELD_CREATED_AT, cyclesv1.ReservationSortField_RESERVATION_SORT_FIELD_EXPIRES_AT} {
		got := ids(e.listAll(&cyclesv1.ListReservationsRequest{Limit: 1, SortBy: by, SortDir: cyclesv1.SortDirection_SORT_DIRECTION_ASC}))
		sort.Strings(got)
		want := []string{a, c}
		sort.Strings(want)
		if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
			t.Fatalf("rows = %v, want %v", got, want)
		}
	}
	for _, idx := range []string{tk.Created(), tk.Expires()} {
		if n := e.c.ZCard(ctx, idx).Val(); n != 3 {
			t.Fatalf("%s holds %d entries after a listing, want 3 (a read must not write)", idx, n)
		}
	}
	e.c.ZRem(ctx, tk.Created(), b)
	e.c.ZRem(ctx, tk.Expires(), b)
}
