package ledger

import (
	"cmp"
	"context"
	"slices"
	"strings"

	pagecursor "github.com/cyclesgo/cycles-go/internal/cursor"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/defaults"
	"github.com/cyclesgo/cycles-go/internal/keys"
)

const (
	// SortWindow is the most matching reservations a listing sorted by a
	// key without an index (reservation id, tenant, scope path, status,
	// reserved amount) may cover: they are read and sorted on each call,
	// so a larger set is refused with a hint to narrow the filters
	// (docs/protocol.md#reads).
	SortWindow = 2000
	// sortScanLimit bounds the index entries one sorted listing walks
	// (list.lua calls of ScanBudget entries each).
	sortScanLimit = 20 * ScanBudget
)

// indexedSort reports whether by is served from a time index, page by page.
func indexedSort(by cyclesv1.ReservationSortField) bool {
	switch by {
	case cyclesv1.ReservationSortField_RESERVATION_SORT_FIELD_UNSPECIFIED,
		cyclesv1.ReservationSortField_RESERVATION_SORT_FIELD_CREATED_AT,
		cyclesv1.ReservationSortField_RESERVATION_SORT_FIELD_EXPIRES_AT:
		return true
	}
	return false
}

// sortedCursor is the opaque position of a sorted listing: the offset into
// the sorted matches. Rows created or settled between pages can shift it,
// as with any offset; the filter hash still pins filters and sort.
type sortedCursor struct {
	V   int    `json:"v"`
	FH  string `json:"fh"`
	Off int    `json:"o"`
}

func (c sortedCursor) pin() (int, string) { return c.V, c.FH }

func (c sortedCursor) valid() bool { return c.Off >= 0 }

// listSorted reads every reservation matching the filters (newest first,
// at most SortWindow of them), sorts them by req's key, ties broken by
// reservation id, and returns one page.
func (l *Ledger) listSorted(ctx context.Context, t keys.Tenant, req *cyclesv1.ListReservationsRequest, fh, filters string, inc map[string]bool) (*cyclesv1.ListReservationsResponse, error) {
	cur := sortedCursor{V: 2, FH: fh}
	if err := decodeListing(req.GetCursor(), &cur); err != nil {
		return nil, err
	}
	lo, hi := "-inf", "+inf"
	if req.CreatedFromMs != nil {
		lo = optMs(req.CreatedFromMs)
	}
	if req.CreatedToMs != nil {
		hi = optMs(req.CreatedToMs)
	}
	var all []*cyclesv1.Reservation
	// With an archive, the walk merges its rows in (each reservation once).
	w := l.walk(t, string(t), t.Created(), "desc", lo, hi, filters, inc, false, stateFilter(req), req)
	pos := mergedCursor{V: 3}
	for walked := 0; ; walked += ScanBudget {
		if walked >= sortScanLimit {
			return nil, tooManyToSort(req.GetSortBy())
		}
		rows, next, more, err := l.mergedPage(ctx, w, pos, SortWindow+1-len(all))
		if err != nil {
			return nil, err
		}
		for i := range rows {
			r, err := rows[i].proto()
			if err != nil {
				return nil, err
			}
			all = append(all, r)
		}
		if len(all) > SortWindow {
			return nil, tooManyToSort(req.GetSortBy())
		}
		if !more {
			break
		}
		pos = next
	}
	key := sortKey(req.GetSortBy())
	desc := req.GetSortDir() != cyclesv1.SortDirection_SORT_DIRECTION_ASC
	slices.SortStableFunc(all, func(a, b *cyclesv1.Reservation) int {
		c := key(a, b)
		if c == 0 {
			c = strings.Compare(a.GetReservationId(), b.GetReservationId())
		}
		if desc {
			return -c
		}
		return c
	})
	limit := int(req.GetLimit())
	defaults.Set(&limit, DefaultPageLimit)
	start := min(cur.Off, len(all))
	end := min(start+limit, len(all))
	resp := &cyclesv1.ListReservationsResponse{Reservations: all[start:end]}
	if end < len(all) {
		resp.HasMore = true
		resp.NextCursor = pagecursor.EncodeJSON(sortedCursor{V: 2, FH: fh, Off: end})
	}
	return resp, nil
}

func tooManyToSort(by cyclesv1.ReservationSortField) error {
	return apierr.Invalid("sort_by", "sorting by %s covers at most %d matching reservations; narrow the filters (status, scope, created window) or sort by created_at_ms or expires_at_ms",
		sortName(by), SortWindow)
}

// sortName is the wire name of a sort key, for messages.
func sortName(by cyclesv1.ReservationSortField) string {
	return strings.ToLower(strings.TrimPrefix(by.String(), "RESERVATION_SORT_FIELD_"))
}

// sortKey compares two reservations by one sort key.
func sortKey(by cyclesv1.ReservationSortField) func(a, b *cyclesv1.Reservation) int {
	switch by {
	case cyclesv1.ReservationSortField_RESERVATION_SORT_FIELD_TENANT:
		return func(a, b *cyclesv1.Reservation) int {
			return strings.Compare(a.GetSubject().GetTenant(), b.GetSubject().GetTenant())
		}
	case cyclesv1.ReservationSortField_RESERVATION_SORT_FIELD_SCOPE_PATH:
		return func(a, b *cyclesv1.Reservation) int { return strings.Compare(a.GetScopePath(), b.GetScopePath()) }
	case cyclesv1.ReservationSortField_RESERVATION_SORT_FIELD_STATUS:
		return func(a, b *cyclesv1.Reservation) int {
			return strings.Compare(a.GetStatus().String(), b.GetStatus().String())
		}
	case cyclesv1.ReservationSortField_RESERVATION_SORT_FIELD_RESERVED:
		return func(a, b *cyclesv1.Reservation) int {
			return cmp.Compare(a.GetReserved().GetAmount(), b.GetReserved().GetAmount())
		}
	default: // reservation id: the tie-break alone
		return func(a, b *cyclesv1.Reservation) int { return 0 }
	}
}
