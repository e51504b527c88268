package archiver

import (
	"bytes"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/ledger"
)

// listAll walks every page of a listing and returns the reservations'
// bytes in order (pages may be cut differently once the archive serves
// part of it; the rows and their order may not differ).
func listAll(t *testing.T, r *rig, led *ledger.Ledger, tn string, req *cyclesv1.ListReservationsRequest) [][]byte {
	t.Helper()
	req = proto.Clone(req).(*cyclesv1.ListReservationsRequest)
	return readPages(t, "listing", req.GetCursor(), func(cursor string) ([][]byte, string, bool, error) {
		req.Cursor = cursor
		res, err := led.List(r.ctx, tn, req)
		return marshalAll(t, res.GetReservations()), res.GetNextCursor(), res.GetHasMore(), err
	})
}

// TestListPastHotWindow: ListReservations with every filter and sort
// lists the same reservations, in the same order and with the same bytes,
// while they are all in Redis, once archived and still in Redis (in both
// stores: each listed once), once some have left Redis (the range spans
// both stores) and once all have; cursors keep working across the merge.
func TestListPastHotWindow(t *testing.T) {
	const tn = "arc-list"
	r := newRig(t, tn)
	rd := Reader{Store: r.store}
	r.led = ledger.New(r.exec, ledger.Options{Archive: true, Archived: rd.Reservation, ArchivedList: rd.Reservations})
	var ids []string
	var first, last int64
	for i := 0; i < 13; i++ {
		ws := []string{"prod", "dev"}[i%2]
		res, err := r.led.Reserve(r.ctx, tn, &cyclesv1.CreateReservationRequest{IdempotencyKey: fmt.Sprintf("list-%d", i),
			Subject: &cyclesv1.Subject{Workspace: ws, Agent: fmt.Sprintf("a%d", i%3)},
			Action:  &cyclesv1.Action{Kind: "llm.completion", Name: "m"}, Estimate: tokens(int64(100 + 7*(i%5))),
			TtlMs: proto.Int64(int64(60_000 + 1000*(i%4)))})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.GetReservationId())
		g, err := r.led.Get(r.ctx, tn, &cyclesv1.GetReservationRequest{ReservationId: res.GetReservationId()})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = g.GetReservation().GetCreatedAtMs()
		}
		last = g.GetReservation().GetCreatedAtMs()
	}
	for i, id := range ids[:12] { // the last stays ACTIVE
		var err error
		if i%3 == 0 {
			_, err = r.led.Release(r.ctx, tn, &cyclesv1.ReleaseReservationRequest{ReservationId: id, IdempotencyKey: "r" + id})
		} else {
			_, err = r.led.Commit(r.ctx, tn, &cyclesv1.CommitReservationRequest{ReservationId: id, IdempotencyKey: "c" + id, Actual: tokens(int64(40 + i))})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	mid := first + (last-first)/2
	var g0 *cyclesv1.GetReservationResponse
	g0, _ = r.led.Get(r.ctx, tn, &cyclesv1.GetReservationRequest{ReservationId: ids[4]})
	fin := *g0.GetReservation().FinalizedAtMs
	asc, desc := cyclesv1.SortDirection_SORT_DIRECTION_ASC, cyclesv1.SortDirection_SORT_DIRECTION_DESC
	byExp := cyclesv1.ReservationSortField_RESERVATION_SORT_FIELD_EXPIRES_AT
	cases := []struct {
		name string
		req  *cyclesv1.ListReservationsRequest
	}{
		{"default", &cyclesv1.ListReservationsRequest{}},
		{"created asc, pages of 2", &cyclesv1.ListReservationsRequest{SortDir: asc, Limit: 2}},
		{"created desc, pages of 1", &cyclesv1.ListReservationsRequest{SortDir: desc, Limit: 1}},
		{"expires asc, pages of 3", &cyclesv1.ListReservationsRequest{SortBy: byExp, SortDir: asc, Limit: 3}},
		{"expires desc, window", &cyclesv1.ListReservationsRequest{SortBy: byExp, ExpiresFromMs: proto.Int64(first + 61_000), Limit: 2}},
		{"committed", &cyclesv1.ListReservationsRequest{Status: cyclesv1.ReservationStatus_RESERVATION_STATUS_COMMITTED, Limit: 3}},
		{"released", &cyclesv1.ListReservationsRequest{Status: cyclesv1.ReservationStatus_RESERVATION_STATUS_RELEASED}},
		{"active", &cyclesv1.ListReservationsRequest{Status: cyclesv1.ReservationStatus_RESERVATION_STATUS_ACTIVE}},
		{"workspace and agent", &cyclesv1.ListReservationsRequest{Workspace: "PROD", Agent: "a1", Limit: 1}},
		{"idempotency key", &cyclesv1.ListReservationsRequest{IdempotencyKey: "list-5"}},
		{"created window", &cyclesv1.ListReservationsRequest{CreatedFromMs: proto.Int64(first), CreatedToMs: proto.Int64(mid), Limit: 2}},
		{"finalized window", &cyclesv1.ListReservationsRequest{FinalizedFromMs: proto.Int64(fin), SortDir: asc, Limit: 2}},
		{"by reserved", &cyclesv1.ListReservationsRequest{SortBy: cyclesv1.ReservationSortField_RESERVATION_SORT_FIELD_RESERVED, SortDir: asc, Limit: 4}},
		{"by status", &cyclesv1.ListReservationsRequest{SortBy: cyclesv1.ReservationSortField_RESERVATION_SORT_FIELD_STATUS, Limit: 5}},
		{"with metadata", &cyclesv1.ListReservationsRequest{Include: []string{"metadata", "committed_metadata"}, Limit: 4}},
	}
	golden := make([][][]byte, len(cases))
	for i, tc := range cases {
		golden[i] = listAll(t, r, r.led, tn, tc.req)
		if len(golden[i]) == 0 {
			t.Fatalf("%s: empty listing proves nothing", tc.name)
		}
	}
	check := func(stage string) {
		t.Helper()
		for i, tc := range cases {
			got := listAll(t, r, r.led, tn, tc.req)
			if len(got) != len(golden[i]) {
				t.Fatalf("%s, %s: %d rows, want %d", stage, tc.name, len(got), len(golden[i]))
			}
			for j := range got {
				if !bytes.Equal(got[j], golden[i][j]) {
					t.Fatalf("%s, %s: row %d differs\n got %x\nwant %x", stage, tc.name, j, got[j], golden[i][j])
				}
			}
		}
	}
	a := r.archiver(ArchiverOptions{})
	if n, err := a.Once(r.ctx); err != nil || n != 12 {
		t.Fatalf("archived %d: %v", n, err)
	}
	check("archived, still in Redis")
	tk := keys.Tenant(tn)
	for i, id := range ids[:12] {
		if i%2 == 0 || i > 8 {
			r.c.Del(r.ctx, tk.Reservation(id))
		}
	}
	check("some past the hot window")
	for _, id := range ids[:12] {
		r.c.Del(r.ctx, tk.Reservation(id))
	}
	check("all past the hot window")
	// A cursor from another listing is refused, as without the archive.
	res, err := r.led.List(r.ctx, tn, &cyclesv1.ListReservationsRequest{Limit: 1})
	if err != nil || res.GetNextCursor() == "" {
		t.Fatalf("%v %v", res, err)
	}
	if _, err := r.led.List(r.ctx, tn, &cyclesv1.ListReservationsRequest{Limit: 1, SortDir: asc, Cursor: res.GetNextCursor()}); err == nil {
		t.Fatal("a cursor of another sort was accepted")
	}
}
