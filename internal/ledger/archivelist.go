package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	pagecursor "github.com/cyclesgo/cycles-go/internal/cursor"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/keys"
)

// ArchiveQuery asks the archive for one page of a tenant's archived
// reservations in a listing's walk order (Options.ArchivedList): by the
// created or expires index score, ties by reservation id, bytewise, as
// Redis orders a sorted set. It carries every ListReservations filter.
type ArchiveQuery struct {
	ByExpiry, Desc bool
	// State is "", COMMITTED, RELEASED or EXPIRED.
	State    string
	IdemKey  string
	Segments []string
	// Inclusive ms windows (nil: open).
	CreatedFrom, CreatedTo, ExpiresFrom, ExpiresTo, FinalizedFrom, FinalizedTo *int64
	// After is the walk position to continue strictly after (nil: start).
	After *ArchiveKey
	Limit int
}

// ArchiveKey is a position in a listing: index score (ms) and id.
type ArchiveKey struct {
	Score int64
	ID    string
}

// ArchivedRecord is an archived reservation: its id and its Redis record's
// fields (internal/archiver RecordOf).
type ArchivedRecord struct {
	ID     string
	Fields map[string]string
}

// mergedCursor is the ListReservations position when the archive serves
// the listing too: the Redis walk's (S, K) as in listCursor, and the
// archive walk's last key (PS, PI; PS empty before the first archived row).
type mergedCursor struct {
	V  int    `json:"v"`
	FH string `json:"fh"`
	S  string `json:"s"`
	K  int64  `json:"k"`
	PS string `json:"ps,omitempty"`
	PI string `json:"pi,omitempty"`
}

// readFields are the record fields list.lua returns without the ones a
// listing includes only on request (RECORD_FIELDS in
// lua/lib/ledger_record.lua: "id", then keys.ReservationLayout's read fields).
var readFields = append([]string{"id"}, keys.ReservationReadFields(false)...)

// archivedRow renders an archived record the way list.lua renders the
// Redis hash it was: the same fields, as strings, the id from the key when
// the record does not store it.
func archivedRow(a ArchivedRecord, inc map[string]bool) (record, error) {
	m := make(map[string]string, len(readFields)+2)
	for _, f := range readFields {
		if v, ok := a.Fields[f]; ok {
			m[f] = v
		}
	}
	if _, ok := m["id"]; !ok {
		m["id"] = a.ID
	}
	for _, f := range keys.ReservationReadFields(true)[len(readFields)-1:] { // the on-request ones
		if v, ok := a.Fields[f]; ok && inc[f] {
			m[f] = v
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		return record{}, fmt.Errorf("archived reservation %s: %w", a.ID, err)
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return record{}, fmt.Errorf("archived reservation %s: %w", a.ID, err)
	}
	return r, nil
}

// pageWalk is what a listing walks: Redis index positions and, with an
// archive, the archive's order too.
type pageWalk struct {
	t             keys.Tenant
	index, dir    string
	lo, hi        string
	filters       string
	inc           map[string]bool
	archive       *ArchiveQuery // nil: Redis only
	byExpiry      bool
	desc          bool
	archivedList  func(ctx context.Context, tenant string, q ArchiveQuery) ([]ArchivedRecord, error)
	tenant        string
	listPageRedis func(ctx context.Context, cur listCursor, limit int) (*listPageResult, error)
}

// before reports whether key a comes before b in the walk order.
func (w *pageWalk) before(a, b ArchiveKey) bool {
	if a.Score != b.Score {
		return (a.Score < b.Score) != w.desc
	}
	if a.ID == b.ID {
		return false
	}
	return (a.ID < b.ID) != w.desc
}

// mergedPage is one page of a listing over Redis and the archive: at most
// limit rows in walk order, a reservation in both stores once (the same
// key in both walks: its Redis row is kept), the position after them, and
// whether more may follow. Rows past either walk's frontier (the last
// entry the Redis walk scanned when its scan budget ran out, the last row
// the archive returned when it had more) wait for the next page, so no row
// is skipped or repeated.
func (l *Ledger) mergedPage(ctx context.Context, w *pageWalk, cur mergedCursor, limit int) ([]record, mergedCursor, bool, error) {
	rp, err := w.listPageRedis(ctx, listCursor{S: cur.S, K: cur.K}, limit)
	if err != nil {
		return nil, cur, false, err
	}
	if len(rp.RS) != len(rp.Rows) || len(rp.RK) != len(rp.Rows) {
		return nil, cur, false, fmt.Errorf("list page: %d rows, %d positions", len(rp.Rows), len(rp.RS))
	}
	rkeys := make([]ArchiveKey, len(rp.Rows))
	for i := range rp.Rows {
		s, err := strconv.ParseInt(rp.RS[i], 10, 64)
		if err != nil {
			return nil, cur, false, fmt.Errorf("list page: score %q: %w", rp.RS[i], err)
		}
		rkeys[i] = ArchiveKey{Score: s, ID: rp.Rows[i].ID}
	}
	var prows []record
	var pkeys []ArchiveKey
	pmore := false
	if w.archive != nil {
		q := *w.archive
		q.Limit = limit + 1
		if cur.PS != "" {
			s, err := strconv.ParseInt(cur.PS, 10, 64)
			if err != nil {
				return nil, cur, false, apierr.Invalid("cursor", "malformed")
			}
			q.After = &ArchiveKey{Score: s, ID: cur.PI}
		}
		recs, err := w.archivedList(ctx, w.tenant, q)
		if err != nil {
			return nil, cur, false, fmt.Errorf("list reservations from the archive: %w", err)
		}
		if len(recs) > limit {
			recs, pmore = recs[:limit], true
		}
		for _, a := range recs {
			r, err := archivedRow(a, w.inc)
			if err != nil {
				return nil, cur, false, err
			}
			score := int64(r.CreatedAt)
			if w.byExpiry {
				score = int64(r.ExpiresAt)
			}
			prows = append(prows, r)
			pkeys = append(pkeys, ArchiveKey{Score: score, ID: r.ID})
		}
	}
	// The frontier: rows up to it are known from both walks.
	var frontier *ArchiveKey
	if rp.More {
		s, err := strconv.ParseInt(rp.S, 10, 64)
		if err != nil {
			return nil, cur, false, fmt.Errorf("list page: position %q: %w", rp.S, err)
		}
		frontier = &ArchiveKey{Score: s, ID: rp.LID}
	}
	if pmore {
		last := pkeys[len(pkeys)-1]
		if frontier == nil || w.before(last, *frontier) {
			frontier = &last
		}
	}
	var out []record
	var lastKey *ArchiveKey
	i, j, lastR := 0, 0, -1
	for len(out) < limit && (i < len(rkeys) || j < len(pkeys)) {
		var k ArchiveKey
		fromR := i < len(rkeys) && (j >= len(pkeys) || !w.before(pkeys[j], rkeys[i]))
		if fromR {
			k = rkeys[i]
		} else {
			k = pkeys[j]
		}
		if frontier != nil && w.before(*frontier, k) {
			break
		}
		if fromR {
			out = append(out, rp.Rows[i])
			lastR = i
			i++
			if j < len(pkeys) && pkeys[j] == k {
				j++ // archived and still in the hot window: once
			}
		} else {
			out = append(out, prows[j])
			j++
		}
		lastKey = &k
	}
	next := cur
	switch {
	case i == len(rkeys) && rp.S != "":
		next.S, next.K = rp.S, int64(rp.K)
	case lastR >= 0:
		next.S, next.K = rp.RS[lastR], int64(rp.RK[lastR])
	}
	if lastKey != nil && w.archive != nil {
		next.PS, next.PI = strconv.FormatInt(lastKey.Score, 10), lastKey.ID
	}
	more := rp.More || pmore || i < len(rkeys) || j < len(pkeys)
	return out, next, more, nil
}

// archiveQuery is the archive's share of a listing, nil when it has none
// (no archive, or only ACTIVE reservations wanted: the archive holds
// settled ones).
func (l *Ledger) archiveQuery(state string, byExpiry, desc bool, idem string, segs []string,
	cf, ct, ef, et, ff, ft *int64) *ArchiveQuery {
	if l.archivedList == nil || state == "ACTIVE" {
		return nil
	}
	return &ArchiveQuery{ByExpiry: byExpiry, Desc: desc, State: state, IdemKey: idem,
		Segments: append([]string(nil), segs...), CreatedFrom: cf, CreatedTo: ct, ExpiresFrom: ef, ExpiresTo: et,
		FinalizedFrom: ff, FinalizedTo: ft}
}

// mergedListing reports whether listings merge the archive's rows (an
// archive reader is configured), which changes the cursor's form.
func (l *Ledger) mergedListing() bool { return l.archivedList != nil }

func (c mergedCursor) pin() (int, string) { return c.V, c.FH }

// valid checks a merged cursor's own fields.
func (c mergedCursor) valid() bool {
	if c.S != "" {
		if _, err := strconv.ParseInt(c.S, 10, 64); err != nil {
			return false
		}
	}
	if c.PS != "" {
		if _, err := strconv.ParseInt(c.PS, 10, 64); err != nil || c.PI == "" {
			return false
		}
	}
	return c.K >= 0 && !strings.ContainsRune(c.PI, 0)
}

// walk is a ListReservations request's walk over its index (and the archive).
func (l *Ledger) walk(t keys.Tenant, tenant, index, dir, lo, hi, filters string, inc map[string]bool, byExpiry bool,
	state string, req *cyclesv1.ListReservationsRequest) *pageWalk {
	segs := segments([6]string{"", req.GetWorkspace(), req.GetApp(), req.GetWorkflow(), req.GetAgent(), req.GetToolset()})
	w := &pageWalk{t: t, tenant: tenant, index: index, dir: dir, lo: lo, hi: hi, filters: filters, inc: inc,
		byExpiry: byExpiry, desc: dir == "desc", archivedList: l.archivedList,
		archive: l.archiveQuery(state, byExpiry, dir == "desc", req.GetIdempotencyKey(), segs,
			req.CreatedFromMs, req.CreatedToMs, req.ExpiresFromMs, req.ExpiresToMs, req.FinalizedFromMs, req.FinalizedToMs)}
	w.listPageRedis = func(ctx context.Context, cur listCursor, limit int) (*listPageResult, error) {
		return l.listPage(ctx, t, index, dir, lo, hi, cur, limit, filters, inc)
	}
	return w
}

// listMerged is one ListReservations page over Redis and the archive.
func (l *Ledger) listMerged(ctx context.Context, w *pageWalk, fh, cursor string, limit int) (*cyclesv1.ListReservationsResponse, error) {
	cur := mergedCursor{V: 3, FH: fh}
	if err := decodeListing(cursor, &cur); err != nil {
		return nil, err
	}
	rows, next, more, err := l.mergedPage(ctx, w, cur, limit)
	if err != nil {
		return nil, err
	}
	resp := &cyclesv1.ListReservationsResponse{}
	for i := range rows {
		r, err := rows[i].proto()
		if err != nil {
			return nil, err
		}
		resp.Reservations = append(resp.Reservations, r)
	}
	if more {
		resp.HasMore = true
		resp.NextCursor = pagecursor.EncodeJSON(next)
	}
	return resp, nil
}
