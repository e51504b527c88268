package ledger_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/cyclesgo/cycles-go/internal/keys"
)

// TestReserveTrimsIndexEntriesOfGoneRecords: a reserve drops the oldest
// listing index entries whose record is gone (its retention, or with an
// archive its hot window, ended), so the indexes follow the records out of
// Redis; it stops at the oldest record that still exists (one still ACTIVE,
// or settled and waiting for the archive, keeps its entries and those
// behind it). The trim is amortised: only a reserve whose id ends in hex
// digit 0 or 8 trims, up to 32 entries; any other leaves the indexes as they
// are.
func TestReserveTrimsIndexEntriesOfGoneRecords(t *testing.T) {
	many := make([]bool, 40) // more gone than one trim removes
	manyWant := []int{}
	for i := range many {
		many[i] = true
		if i >= 32 {
			manyWant = append(manyWant, i)
		}
	}
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
		{"40 gone: the oldest 32 trimmed", many, append(manyWant, 40)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newFundedEnv(t, 1_000)
			tk := keys.Tenant(e.tenant)
			var ids []string
			for i := range tc.gone {
				id := e.mustReserve("k"+strconv.Itoa(i), 1).ReservationId
				ids = append(ids, id)
				// Distinct creation scores (reserves within one ms tie, and a
				// tie is ordered by id): the order the case describes.
				if err := e.c.ZAdd(ctx, tk.Created(), redis.Z{Score: float64(i + 1), Member: id}).Err(); err != nil {
					t.Fatal(err)
				}
			}
			// Only now are records gone (every record existed while the
			// reserves above ran, so none of them trimmed anything).
			for i, g := range tc.gone {
				if g {
					if _, err := e.release(ids[i], "r"+ids[i]); err != nil {
						t.Fatal(err)
					}
					if err := e.c.Del(ctx, tk.Reservation(ids[i])).Err(); err != nil {
						t.Fatal(err)
					}
				}
			}
			// Reserves whose id does not trim leave every entry; the first
			// that trims ends the loop (1 in 8 ids: 200 tries all missing
			// is a 1e-11 chance).
			before := slices.Clone(ids)
			slices.Sort(before)
			var extra []string
			for n := 0; ; n++ {
				if n == 200 {
					t.Fatal("no reservation id ending in 0 or 8 in 200 reserves")
				}
				id := e.mustReserve("new"+strconv.Itoa(n), 1).ReservationId
				extra = append(extra, id)
				if strings.HasSuffix(id, "0") || strings.HasSuffix(id, "8") {
					break
				}
				want := append(slices.Clone(before), extra...)
				slices.Sort(want)
				if got := e.c.ZRange(ctx, tk.Created(), 0, -1).Val(); !slices.Equal(sorted(got), want) {
					t.Fatalf("reserve %s (no trim) left %v, want %v", id, got, want)
				}
			}
			ids = append(ids, extra[len(extra)-1])
			var want []string
			for _, i := range tc.want {
				want = append(want, ids[i])
			}
			want = append(want, extra[:len(extra)-1]...)
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

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
