package ledger_test

import (
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/cyclesgo/cycles-go/internal/keys"
)

// TestReserveTrimsIndexEntriesOfGoneRecords: a reserve drops the oldest
// listing index entries whose record is gone (its retention, or with an
// archive its hot window, ended), so the indexes follow the records out of
// Redis; it stops at the oldest record that still exists (one still ACTIVE,
// or settled and waiting for the archive, keeps its entries and those
// behind it).
func TestReserveTrimsIndexEntriesOfGoneRecords(t *testing.T) {
	cases := []struct {
		name string
		// gone[i]: the i-th reservation (oldest first) is released and its
		// record deleted, as its TTL would.
		gone []bool
		want []int // the reservations whose entries remain (the new one too)
	}{
		{"every older record gone", []bool{true, true, true}, []int{3}},
		{"the oldest gone, then one that exists", []bool{true, false, true}, []int{1, 2, 3}},
		{"the oldest exists", []bool{false, true, true}, []int{0, 1, 2, 3}},
		{"nothing gone", []bool{false, false}, []int{0, 1, 2}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newFundedEnv(t, 1_000)
			tk := keys.Tenant(e.tenant)
			var ids []string
			for i, g := range tc.gone {
				id := e.mustReserve("k"+string(rune('a'+i)), 1).ReservationId
				ids = append(ids, id)
				// Distinct creation scores (reserves within one ms tie, and a
				// tie is ordered by id): the order the case describes.
				if err := e.c.ZAdd(ctx, tk.Created(), redis.Z{Score: float64(i + 1), Member: id}).Err(); err != nil {
					t.Fatal(err)
				}
				if g {
					if _, err := e.release(id, "r"+id); err != nil {
						t.Fatal(err)
					}
					if err := e.c.Del(ctx, tk.Reservation(id)).Err(); err != nil {
						t.Fatal(err)
					}
				}
			}
			ids = append(ids, e.mustReserve("new", 1).ReservationId)
			var want []string
			for _, i := range tc.want {
				want = append(want, ids[i])
			}
			slices.Sort(want)
			for _, idx := range []string{tk.Created(), tk.Expires()} {
				got := e.c.ZRange(ctx, idx, 0, -1).Val()
				slices.Sort(got)
				if !slices.Equal(got, want) {
					t.Fatalf("%s holds %v, want %v", idx, got, want)
				}
			}
		})
	}
}
