package events

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/cyclesgo/cycles-go/internal/cursor"

	"github.com/cyclesgo/cycles-go/internal/apierr"
)

// ID is a Redis stream entry id "<ms>-<seq>": the position of an event in its
// tenant's log. Ids only grow, so they order a tenant's events.
type ID struct {
	MS  uint64
	Seq uint64
}

// ParseID parses "<ms>-<seq>" (both decimal, no sign).
func ParseID(s string) (ID, error) {
	ms, seq, ok := strings.Cut(s, "-")
	if !ok {
		return ID{}, fmt.Errorf("stream id %q: want <ms>-<seq>", s)
	}
	a, err := parseDigits(ms)
	if err != nil {
		return ID{}, fmt.Errorf("stream id %q: %w", s, err)
	}
	b, err := parseDigits(seq)
	if err != nil {
		return ID{}, fmt.Errorf("stream id %q: %w", s, err)
	}
	return ID{MS: a, Seq: b}, nil
}

// parseDigits accepts 1..20 ASCII digits only (strconv alone would accept "+1").
func parseDigits(s string) (uint64, error) {
	if len(s) == 0 || len(s) > 20 {
		return 0, fmt.Errorf("bad number %q", s)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("bad number %q", s)
		}
	}
	return strconv.ParseUint(s, 10, 64)
}

func (id ID) String() string {
	return strconv.FormatUint(id.MS, 10) + "-" + strconv.FormatUint(id.Seq, 10)
}

// Less orders ids as Redis does.
func (id ID) Less(o ID) bool {
	return id.MS < o.MS || id.MS == o.MS && id.Seq < o.Seq
}

// Next is the smallest id after id (XRANGE bounds are inclusive).
func (id ID) Next() ID {
	if id.Seq == math.MaxUint64 {
		return ID{MS: id.MS + 1}
	}
	return ID{MS: id.MS, Seq: id.Seq + 1}
}

// Position is where a reader stands: every event up to and including ID has
// been read. Watermark is a Redis time (ms) at which the reader had read
// everything up to ID, so any later event has a stream id of at least about
// Watermark; it lets an idle, caught-up reader tell "my last event was trimmed
// by retention" (harmless) from "events I never saw were trimmed" (a gap).
// For an event's own cursor the watermark is implied by its id.
type Position struct {
	ID        ID
	Watermark int64
}

// mark is the effective watermark: at least the id's own time.
func (p Position) mark() int64 {
	if ms := int64(p.ID.MS); ms > p.Watermark && p.ID.MS <= math.MaxInt64 {
		return ms
	}
	return p.Watermark
}

// EncodeCursor is the opaque, URL-safe cursor of p: base64url of the stream id,
// followed by ".<watermark>" when the watermark says more than the id.
func EncodeCursor(p Position) string {
	return cursor.Encode(withMark(p.ID.String(), p.ID, p.Watermark))
}

// DecodeCursor parses a cursor made by EncodeCursor. Anything else is
// INVALID_REQUEST naming field.
func DecodeCursor(field, c string) (Position, error) {
	bad := func() (Position, error) {
		return Position{}, apierr.Invalid(field, "is not a cursor issued by this server")
	}
	idPart, mark, ok := cursorParts(field, c, 128)
	if !ok {
		return bad()
	}
	id, err := ParseID(idPart)
	if err != nil {
		return bad()
	}
	p := Position{ID: id, Watermark: mark}
	// Only canonical encodings are accepted, so one position has one cursor.
	if EncodeCursor(p) != c {
		return bad()
	}
	return p, nil
}

// cursorParts decodes c, a cursor of 1..max characters, and splits its text
// into what precedes ".<watermark>" and the watermark (0 without one); ok is
// false when c is not base64url or the watermark is malformed.
func cursorParts(field, c string, max int) (body string, watermark int64, ok bool) {
	if c == "" || len(c) > max {
		return "", 0, false
	}
	raw, err := cursor.Decode(field, c)
	if err != nil {
		return "", 0, false
	}
	body, markPart, hasMark := strings.Cut(raw, ".")
	if !hasMark {
		return body, 0, true
	}
	watermark, ok = parseWatermark(markPart)
	return body, watermark, ok
}

// withMark is s followed by ".<watermark>" when the watermark says more than
// id's own time (both cursor kinds end so).
func withMark(s string, id ID, watermark int64) string {
	if watermark > 0 && watermark > int64(id.MS) {
		s += "." + strconv.FormatInt(watermark, 10)
	}
	return s
}

// parseWatermark is a cursor's watermark: decimal digits within int64.
func parseWatermark(s string) (int64, bool) {
	w, err := parseDigits(s)
	if err != nil || w > math.MaxInt64 {
		return 0, false
	}
	return int64(w), true
}

// before is the largest id before id (id must not be 0-0).
func (id ID) before() ID {
	if id.Seq == 0 {
		return ID{MS: id.MS - 1, Seq: math.MaxUint64}
	}
	return ID{MS: id.MS, Seq: id.Seq - 1}
}
