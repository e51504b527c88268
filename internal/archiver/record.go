package archiver

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cyclesgo/cycles-go/internal/archive"
	"github.com/cyclesgo/cycles-go/internal/ledger"
)

// A reservation record (internal/keys/records.go) becomes one archive row:
// the fields reads and analysts filter on go to their own columns, every
// other field (the settling call's stored replies: commit/release keys and
// hashes, the cb<i>/lb<i>/rb<i> balance rows, metrics, ...) goes to the
// row's `replay` bytes. The mapping is lossless: RecordOf(RowOf(f)) == f for
// any record, so a read or replay past the hot window can rebuild the very
// hash the Redis scripts render from. A value a column cannot hold exactly
// (a non-canonical number, an empty or absent value where the column has a
// default, text PostgreSQL refuses: invalid UTF-8, NUL) stays in `replay`.

// stateOf and stateName map the terminal states to the column's codes.
var stateOf = map[string]archive.State{
	"COMMITTED": archive.StateCommitted, "RELEASED": archive.StateReleased, "EXPIRED": archive.StateExpired,
}

var stateName = map[archive.State]string{
	archive.StateCommitted: "COMMITTED", archive.StateReleased: "RELEASED", archive.StateExpired: "EXPIRED",
}

// textColumns are the record fields with a text column; "" in the column
// means absent.
var textColumns = []struct {
	field string
	col   func(*archive.Reservation) *string
}{
	{"unit", func(r *archive.Reservation) *string { return &r.Unit }},
	{"scope_path", func(r *archive.Reservation) *string { return &r.ScopePath }},
	{"policy", func(r *archive.Reservation) *string { return &r.Policy }},
	{"idem_key", func(r *archive.Reservation) *string { return &r.IdemKey }},
	{"subject", func(r *archive.Reservation) *string { return &r.Subject }},
	{"action", func(r *archive.Reservation) *string { return &r.Action }},
	{"affected", func(r *archive.Reservation) *string { return &r.Affected }},
	{"budgeted", func(r *archive.Reservation) *string { return &r.Budgeted }},
	{"metadata", func(r *archive.Reservation) *string { return &r.Metadata }},
	{"committed_metadata", func(r *archive.Reservation) *string { return &r.CommittedMetadata }},
}

// intColumns are the record fields with an integer column. The record
// leaves debt_incurred and ext_count out while 0, so for them 0 in the
// column means absent; the others are always written, and an absent one is
// listed in the replay bytes (absentKey).
var intColumns = []struct {
	field      string
	zeroAbsent bool
	set        func(*archive.Reservation, int64) bool
	get        func(*archive.Reservation) int64
}{
	{"estimate", false, func(r *archive.Reservation, v int64) bool { r.Estimate = v; return true },
		func(r *archive.Reservation) int64 { return r.Estimate }},
	{"debt_incurred", true, func(r *archive.Reservation, v int64) bool { r.DebtIncurred = v; return true },
		func(r *archive.Reservation) int64 { return r.DebtIncurred }},
	{"created_at", false, func(r *archive.Reservation, v int64) bool { r.CreatedAtMs = v; return true },
		func(r *archive.Reservation) int64 { return r.CreatedAtMs }},
	{"expires_at", false, func(r *archive.Reservation, v int64) bool { r.ExpiresAtMs = v; return true },
		func(r *archive.Reservation) int64 { return r.ExpiresAtMs }},
	{"grace_ms", false, func(r *archive.Reservation, v int64) bool { r.GraceMs = v; return true },
		func(r *archive.Reservation) int64 { return r.GraceMs }},
	{"ext_count", true, func(r *archive.Reservation, v int64) bool {
		if int64(int32(v)) != v {
			return false
		}
		r.ExtCount = int32(v)
		return true
	}, func(r *archive.Reservation) int64 { return int64(r.ExtCount) }},
	{"max_ext", false, func(r *archive.Reservation, v int64) bool {
		if int64(int32(v)) != v {
			return false
		}
		r.MaxExt = int32(v)
		return true
	}, func(r *archive.Reservation) int64 { return int64(r.MaxExt) }},
}

// absentKey, in the replay bytes, lists the always-written int fields (and
// the settle-time field) the record did not have, comma-separated. It
// cannot clash with a record field: those never start with a NUL byte.
const absentKey = "\x00absent"

// settleField is the record field holding the settle time of a state.
func settleField(s archive.State) string {
	if s == archive.StateExpired {
		return "expired_at"
	}
	return "finalized_at"
}

// errNotTerminal refuses a record that is not COMMITTED, RELEASED or EXPIRED.
var errNotTerminal = errors.New("record is not settled")

// RowOf maps the record f (HGETALL) of reservation id of tenant to its
// archive row. archivedAt (Redis TIME) is the row's settle time when the
// record has no usable one, so the row still lands in a day partition.
func RowOf(tenant, id string, f map[string]string, archivedAt time.Time) (archive.Reservation, error) {
	r := archive.Reservation{TenantID: tenant, ReservationID: id}
	st, ok := stateOf[f["state"]]
	if !ok {
		return r, fmt.Errorf("reservation %s state %q: %w", id, f["state"], errNotTerminal)
	}
	r.State = st
	rest := make(map[string]string, len(f))
	for k, v := range f {
		if k != "state" {
			rest[k] = v
		}
	}
	var absent []string
	for _, c := range textColumns {
		if v, ok := rest[c.field]; ok && v != "" && pgText(v) {
			*c.col(&r) = v
			delete(rest, c.field)
		}
	}
	for _, c := range intColumns {
		v, ok := rest[c.field]
		if !ok {
			if !c.zeroAbsent {
				absent = append(absent, c.field)
			}
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || strconv.FormatInt(n, 10) != v || (c.zeroAbsent && n == 0) || !c.set(&r, n) {
			continue // stays in rest, exactly as it was
		}
		delete(rest, c.field)
	}
	if v, ok := rest["charged"]; ok {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && strconv.FormatInt(n, 10) == v {
			r.Charged = &n
			delete(rest, "charged")
		}
	}
	r.SettledAt = archivedAt.UTC()
	sf := settleField(st)
	if v, ok := rest[sf]; !ok {
		absent = append(absent, sf)
	} else if n, err := strconv.ParseInt(v, 10, 64); err == nil && strconv.FormatInt(n, 10) == v && n > 0 {
		r.SettledAt = time.UnixMilli(n).UTC()
		delete(rest, sf)
	}
	if len(absent) > 0 {
		rest[absentKey] = strings.Join(absent, ",")
	}
	r.Replay = encodeFields(rest)
	return r, nil
}

// RecordOf is RowOf's inverse: the record's fields.
func RecordOf(r archive.Reservation) (map[string]string, error) {
	rest, err := decodeFields(r.Replay)
	if err != nil {
		return nil, fmt.Errorf("reservation %s: replay bytes: %w", r.ReservationID, err)
	}
	name, ok := stateName[r.State]
	if !ok {
		return nil, fmt.Errorf("reservation %s: state %d", r.ReservationID, r.State)
	}
	absent := map[string]bool{}
	if a, ok := rest[absentKey]; ok {
		for _, f := range strings.Split(a, ",") {
			absent[f] = true
		}
		delete(rest, absentKey)
	}
	f := map[string]string{"state": name}
	for _, c := range textColumns {
		if v := *c.col(&r); v != "" {
			f[c.field] = v
		}
	}
	for _, c := range intColumns {
		v := c.get(&r)
		if absent[c.field] || (c.zeroAbsent && v == 0) {
			continue
		}
		f[c.field] = strconv.FormatInt(v, 10)
	}
	if r.Charged != nil {
		f["charged"] = strconv.FormatInt(*r.Charged, 10)
	}
	if sf := settleField(r.State); !absent[sf] {
		f[sf] = strconv.FormatInt(r.SettledAt.UnixMilli(), 10)
	}
	for k, v := range rest { // the fields kept as they were win
		f[k] = v
	}
	return f, nil
}

// pgText reports whether PostgreSQL's text type stores v unchanged.
func pgText(v string) bool { return utf8.ValidString(v) && !strings.Contains(v, "\x00") }

// encodeFields packs fields as (uvarint length, bytes) pairs in key order:
// binary-safe, unlike JSON (which would replace invalid UTF-8). nil when
// there are none.
func encodeFields(m map[string]string) []byte {
	if len(m) == 0 {
		return nil
	}
	ks := make([]string, 0, len(m))
	n := 0
	for k, v := range m {
		ks = append(ks, k)
		n += len(k) + len(v) + 2*binary.MaxVarintLen32
	}
	sort.Strings(ks)
	out := make([]byte, 0, n)
	for _, k := range ks {
		out = binary.AppendUvarint(out, uint64(len(k)))
		out = append(out, k...)
		out = binary.AppendUvarint(out, uint64(len(m[k])))
		out = append(out, m[k]...)
	}
	return out
}

// decodeFields is encodeFields' inverse.
func decodeFields(b []byte) (map[string]string, error) {
	m := map[string]string{}
	next := func() (string, error) {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return "", errors.New("truncated")
		}
		s := string(b[k : k+int(n)])
		b = b[k+int(n):]
		return s, nil
	}
	for len(b) > 0 {
		k, err := next()
		if err != nil {
			return nil, err
		}
		v, err := next()
		if err != nil {
			return nil, err
		}
		m[k] = v
	}
	return m, nil
}

// Reader finds archived reservations for the domain packages' reads past
// the hot window (ledger.Options.Archived).
type Reader struct{ Store *archive.Store }

// Reservation returns the Redis record fields of an archived reservation
// of tenant (false: not archived, or its day was dropped).
func (r Reader) Reservation(ctx context.Context, tenant, id string) (map[string]string, bool, error) {
	row, ok, err := r.Store.GetReservation(ctx, tenant, id)
	if err != nil || !ok {
		return nil, false, err
	}
	f, err := RecordOf(row)
	if err != nil {
		return nil, false, err
	}
	return f, true, nil
}

// Reservations pages tenant's archived reservations for a listing
// (ledger.Options.ArchivedList): each one's Redis record fields, in the
// query's walk order.
func (r Reader) Reservations(ctx context.Context, tenant string, q ledger.ArchiveQuery) ([]ledger.ArchivedRecord, error) {
	aq := archive.ReservationQuery{Tenant: tenant, ByExpiry: q.ByExpiry, Desc: q.Desc, IdemKey: q.IdemKey,
		Segments: q.Segments, CreatedFrom: q.CreatedFrom, CreatedTo: q.CreatedTo, ExpiresFrom: q.ExpiresFrom,
		ExpiresTo: q.ExpiresTo, FinalizedFrom: q.FinalizedFrom, FinalizedTo: q.FinalizedTo, Limit: q.Limit}
	if q.State != "" {
		st, ok := stateOf[q.State]
		if !ok {
			return nil, nil // ACTIVE (or unknown): nothing settled matches
		}
		aq.State = st
	}
	if q.After != nil {
		aq.After = &archive.Key{Score: q.After.Score, ID: q.After.ID}
	}
	rows, err := r.Store.ListReservations(ctx, aq)
	if err != nil {
		return nil, err
	}
	out := make([]ledger.ArchivedRecord, 0, len(rows))
	for _, row := range rows {
		f, err := RecordOf(row)
		if err != nil {
			return nil, err
		}
		out = append(out, ledger.ArchivedRecord{ID: row.ReservationID, Fields: f})
	}
	return out, nil
}
