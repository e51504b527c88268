package ledger_test

import (
	"cmp"
	"slices"
	"testing"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/ledger"
)

// TestListReservationsSortedByKeysWithoutIndex: the keys without an index
// order every matching row (ties by id), in both directions, across pages.
func TestListReservationsSortedByKeysWithoutIndex(t *testing.T) {
	e := newFundedEnv(t, 1_000_000)
	amounts := map[string]int64{}
	paths := map[string]string{}
	status := map[string]string{}
	for i, a := range []int64{30_000, 75_000, 5, 75_000, 1_200, 9} {
		ws := []string{"b", "a", "c"}[i%3]
		r := e.mustReserve("s"+itoa(int64(i)), a, withSubject(&cyclesv1.Subject{Workspace: ws}))
		amounts[r.ReservationId] = a
		paths[r.ReservationId] = e.scope("workspace:" + ws)
		status[r.ReservationId] = "RESERVATION_STATUS_ACTIVE"
		if i == 2 {
			if _, err := e.release(r.ReservationId, "rel"); err != nil {
				t.Fatal(err)
			}
			status[r.ReservationId] = "RESERVATION_STATUS_RELEASED"
		}
	}
	cases := []struct {
		by  cyclesv1.ReservationSortField
		key func(a, b string) int
	}{
		{cyclesv1.ReservationSortField_RESERVATION_SORT_FIELD_RESERVED, func(a, b string) int { return cmp.Compare(amounts[a], amounts[b]) }},
		{cyclesv1.ReservationSortField_RESERVATION_SORT_FIELD_SCOPE_PATH, func(a, b string) int { return cmp.Compare(paths[a], paths[b]) }},
		{cyclesv1.ReservationSortField_RESERVATION_SORT_FIELD_STATUS, func(a, b string) int { return cmp.Compare(status[a], status[b]) }},
		{cyclesv1.ReservationSortField_RESERVATION_SORT_FIELD_RESERVATION_ID, func(a, b string) int { return 0 }},
		{cyclesv1.ReservationSortField_RESERVATION_SORT_FIELD_TENANT, func(a, b string) int { return 0 }},
	}
	for _, c := range cases {
		for _, dir := range []cyclesv1.SortDirection{cyclesv1.SortDirection_SORT_DIRECTION_ASC, cyclesv1.SortDirection_SORT_DIRECTION_DESC} {
			t.Run(c.by.String()+"/"+dir.String(), func(t *testing.T) {
				got := ids(e.listAll(&cyclesv1.ListReservationsRequest{SortBy: c.by, SortDir: dir, Limit: 4}))
				want := make([]string, 0, len(amounts))
				for id := range amounts {
					want = append(want, id)
				}
				slices.SortFunc(want, func(a, b string) int {
					k := c.key(a, b)
					if k == 0 {
						k = cmp.Compare(a, b)
					}
					if dir == cyclesv1.SortDirection_SORT_DIRECTION_DESC {
						return -k
					}
					return k
				})
				if !slices.Equal(got, want) {
					t.Fatalf("order %v, want %v", got, want)
				}
			})
		}
	}

	// A cursor is bound to its sort.
	first, err := e.l.List(ctx, e.tenant, &cyclesv1.ListReservationsRequest{SortBy: cyclesv1.ReservationSortField_RESERVATION_SORT_FIELD_RESERVED, Limit: 2})
	if err != nil || !first.GetHasMore() {
		t.Fatalf("first page: %v, has_more %v", err, first.GetHasMore())
	}
	_, err = e.l.List(ctx, e.tenant, &cyclesv1.ListReservationsRequest{SortBy: cyclesv1.ReservationSortField_RESERVATION_SORT_FIELD_STATUS, Limit: 2, Cursor: first.GetNextCursor()})
	wantCode(t, err, apierr.InvalidRequest)
}

// TestListReservationsSortWindow: more matches than SortWindow are refused
// with the field named, not read without bound.
func TestListReservationsSortWindow(t *testing.T) {
	e := newFundedEnv(t, 1_000_000)
	for i := 0; i <= ledger.SortWindow; i++ {
		e.mustReserve("w"+itoa(int64(i)), 1)
	}
	_, err := e.l.List(ctx, e.tenant, &cyclesv1.ListReservationsRequest{SortBy: cyclesv1.ReservationSortField_RESERVATION_SORT_FIELD_RESERVED})
	if ae := wantCode(t, err, apierr.InvalidRequest); ae.Details["field"] != "sort_by" {
		t.Fatalf("sort over %d rows: %v, want the field sort_by named", ledger.SortWindow+1, err)
	}
	// The indexed sorts still page through them.
	page, err := e.l.List(ctx, e.tenant, &cyclesv1.ListReservationsRequest{SortBy: cyclesv1.ReservationSortField_RESERVATION_SORT_FIELD_EXPIRES_AT})
	if err != nil || len(page.GetReservations()) == 0 {
		t.Fatalf("expires sort: %v", err)
	}
}
