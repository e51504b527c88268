package archiver

import (
	"context"
	"encoding/base64"
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
	{"scope_path", func(r *archive.Reservation) *string { return &r.ScopePath }},
	{"idem_key", func(r *archive.Reservation) *string { return &r.IdemKey }},
	{"subject", func(r *archive.Reservation) *string { return &r.Subject }},
	{"affected", func(r *archive.Reservation) *string { return &r.Affected }},
	{"budgeted", func(r *archive.Reservation) *string { return &r.Budgeted }},
	{"metadata", func(r *archive.Reservation) *string { return &r.Metadata }},
	{"committed_metadata", func(r *archive.Reservation) *string { return &r.CommittedMetadata }},
}

// intColumns are the record fields with an integer column. The record
// leaves debt_incurred and ext_count out while 0, so for them 0 in the
// column means absent; the others are always written, and an absent one is
// listed in the replay bytes (absentKey).
var intColumns = []intColumn{
	intCol("estimate", false, func(r *archive.Reservation) *int64 { return &r.Estimate }),
	intCol("debt_incurred", true, func(r *archive.Reservation) *int64 { return &r.DebtIncurred }),
	intCol("created_at", false, func(r *archive.Reservation) *int64 { return &r.CreatedAtMs }),
	intCol("expires_at", false, func(r *archive.Reservation) *int64 { return &r.ExpiresAtMs }),
	intCol("grace_ms", false, func(r *archive.Reservation) *int32 { return &r.GraceMs }),
	intCol("ext_count", true, func(r *archive.Reservation) *int16 { return &r.ExtCount }),
	intCol("max_ext", false, func(r *archive.Reservation) *int16 { return &r.MaxExt }),
}

// intColumn is one of intColumns: set refuses a value its column's type
// cannot hold.
type intColumn struct {
	field      string
	zeroAbsent bool
	set        func(*archive.Reservation, int64) bool
	get        func(*archive.Reservation) int64
}

// intCol is the intColumn of the record field field, held at col.
func intCol[T int16 | int32 | int64](field string, zeroAbsent bool, col func(*archive.Reservation) *T) intColumn {
	return intColumn{field, zeroAbsent,
		func(r *archive.Reservation, v int64) bool {
			if int64(T(v)) != v {
				return false
			}
			*col(r) = T(v)
			return true
		},
		func(r *archive.Reservation) int64 { return int64(*col(r)) }}
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
	if v, ok := rest["policy"]; ok && v != "" {
		if _, ok := archive.PolicyCode(v); ok {
			r.Policy = v
			delete(rest, "policy")
		}
	}
	if v, ok := rest["unit"]; ok && v != "" {
		if _, ok := archive.UnitCode(v); ok {
			r.Unit = v
			delete(rest, "unit")
		}
	}
	if v, ok := rest["action"]; ok && v != "" {
		if kind, name, ok := splitAction(v); ok {
			r.ActionKind, r.ActionName = kind, name
			delete(rest, "action")
		} else if pgText(v) {
			r.Action = v
			delete(rest, "action")
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
	if r.Policy != "" {
		f["policy"] = r.Policy
	}
	if r.Unit != "" {
		f["unit"] = r.Unit
	}
	if r.ActionKind != "" {
		f["action"] = joinAction(r.ActionKind, r.ActionName)
	} else if r.Action != "" {
		f["action"] = r.Action
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

// splitAction splits the action JSON {"kind":K,"name":N} (as the ledger
// writes it for an action without tags) into K and N when joinAction
// renders it back byte for byte: neither needs escaping, K is not empty.
func splitAction(v string) (kind, name string, ok bool) {
	body, ok := strings.CutPrefix(v, `{"kind":"`)
	if !ok {
		return "", "", false
	}
	body, ok = strings.CutSuffix(body, `"}`)
	if !ok {
		return "", "", false
	}
	kind, name, ok = strings.Cut(body, `","name":"`)
	if !ok || kind == "" || !plainJSON(kind) || !plainJSON(name) || joinAction(kind, name) != v {
		return "", "", false
	}
	return kind, name, true
}

// joinAction is splitAction's inverse.
func joinAction(kind, name string) string { return `{"kind":"` + kind + `","name":"` + name + `"}` }

// plainJSON reports whether s is printable ASCII a JSON string holds
// without escapes (no quote, no backslash).
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// The replay bytes (the record fields no column holds) are written in a
// compact form, version 2: a 0x00 byte (the first byte of the version 1
// form, (uvarint length, bytes) pairs in key order, is the length of a
// field name, never 0), then per field in key order one tag byte (value
// form << 6 | name code; code 0: the name follows as uvarint length and
// bytes) and the value:
//
//   - formRaw: uvarint length, bytes;
//   - formInts: a canonical comma-separated int64 list (the balance rows
//     rb<i>, cb<i>, lb<i>): uvarint count, then each as a zigzag varint;
//   - formB64: unpadded base64url (the stored request hashes): uvarint
//     length, the decoded bytes.
//
// A value is only written in a short form when decoding gives it back byte
// for byte; decodeFields reads both versions.
const (
	formRaw  = 0
	formInts = 1
	formB64  = 2
	v2Marker = 0x00
)

// fieldNames are the name codes 1..63 of the compact form: the record fields
// that stay in the replay bytes of typical records. Append only: stored
// rows carry these codes.
var fieldNames = func() []string {
	names := []string{"", absentKey, "commit_key", "commit_hash", "release_key", "release_hash",
		"release_reason", "metrics", "exp0", "extend_metadata", "caps", "quarantined_at", "quarantine_reason",
		"quarantine_resolution", "expired_at", "finalized_at", "charged"}
	for _, p := range []string{"rb", "cb", "lb"} {
		for i := 1; i <= 9; i++ {
			names = append(names, p+strconv.Itoa(i))
		}
	}
	return names
}()

var fieldCode = func() map[string]byte {
	m := make(map[string]byte, len(fieldNames))
	for i, n := range fieldNames[1:] {
		m[n] = byte(i + 1)
	}
	return m
}()

// encodeFields packs fields in the compact form (binary-safe, unlike JSON,
// which would replace invalid UTF-8). nil when there are none.
func encodeFields(m map[string]string) []byte {
	if len(m) == 0 {
		return nil
	}
	ks := make([]string, 0, len(m))
	n := 1
	for k, v := range m {
		ks = append(ks, k)
		n += len(k) + len(v) + 1 + 2*binary.MaxVarintLen32
	}
	sort.Strings(ks)
	out := make([]byte, 1, n)
	out[0] = v2Marker
	for _, k := range ks {
		v := m[k]
		form, payload := formRaw, []byte(nil)
		if ints, ok := intList(v); ok {
			form = formInts
			payload = binary.AppendUvarint(payload, uint64(len(ints)))
			for _, x := range ints {
				payload = binary.AppendVarint(payload, x)
			}
		} else if raw, err := base64.RawURLEncoding.DecodeString(v); err == nil && len(raw) > 0 &&
			base64.RawURLEncoding.EncodeToString(raw) == v {
			form = formB64
			payload = binary.AppendUvarint(payload, uint64(len(raw)))
			payload = append(payload, raw...)
		} else {
			payload = binary.AppendUvarint(payload, uint64(len(v)))
			payload = append(payload, v...)
		}
		code := fieldCode[k]
		out = append(out, byte(form<<6)|code)
		if code == 0 {
			out = binary.AppendUvarint(out, uint64(len(k)))
			out = append(out, k...)
		}
		out = append(out, payload...)
	}
	return out
}

// intList parses v as comma-separated int64s written canonically (false
// when FormatInt would not give v back).
func intList(v string) ([]int64, bool) {
	if v == "" {
		return nil, false
	}
	parts := strings.Split(v, ",")
	out := make([]int64, len(parts))
	for i, p := range parts {
		x, err := strconv.ParseInt(p, 10, 64)
		if err != nil || strconv.FormatInt(x, 10) != p {
			return nil, false
		}
		out[i] = x
	}
	return out, true
}

// decodeFields is encodeFields' inverse (either version).
func decodeFields(b []byte) (map[string]string, error) {
	m := map[string]string{}
	uvarint := func() (uint64, error) {
		n, k := binary.Uvarint(b)
		if k <= 0 {
			return 0, errors.New("truncated")
		}
		b = b[k:]
		return n, nil
	}
	bytesN := func() (string, error) {
		n, err := uvarint()
		if err != nil || n > uint64(len(b)) {
			return "", errors.New("truncated")
		}
		s := string(b[:n])
		b = b[n:]
		return s, nil
	}
	if len(b) == 0 || b[0] != v2Marker {
		for len(b) > 0 { // version 1
			k, err := bytesN()
			if err != nil {
				return nil, err
			}
			v, err := bytesN()
			if err != nil {
				return nil, err
			}
			m[k] = v
		}
		return m, nil
	}
	b = b[1:]
	for len(b) > 0 {
		tag := b[0]
		b = b[1:]
		code, form := int(tag&0x3f), int(tag>>6)
		var k string
		if code == 0 {
			var err error
			if k, err = bytesN(); err != nil {
				return nil, err
			}
		} else if code < len(fieldNames) {
			k = fieldNames[code]
		} else {
			return nil, fmt.Errorf("field code %d", code)
		}
		switch form {
		case formRaw:
			v, err := bytesN()
			if err != nil {
				return nil, err
			}
			m[k] = v
		case formInts:
			n, err := uvarint()
			if err != nil || n == 0 || n > uint64(len(b)) {
				return nil, errors.New("truncated int list")
			}
			var sb []byte
			for i := uint64(0); i < n; i++ {
				x, w := binary.Varint(b)
				if w <= 0 {
					return nil, errors.New("truncated int list")
				}
				b = b[w:]
				if i > 0 {
					sb = append(sb, ',')
				}
				sb = strconv.AppendInt(sb, x, 10)
			}
			m[k] = string(sb)
		case formB64:
			v, err := bytesN()
			if err != nil {
				return nil, err
			}
			m[k] = base64.RawURLEncoding.EncodeToString([]byte(v))
		default:
			return nil, fmt.Errorf("value form %d", form)
		}
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
