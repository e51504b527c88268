package events

import (
	"strings"

	"github.com/cyclesgo/cycles-go/internal/cursor"

	"github.com/cyclesgo/cycles-go/internal/apierr"
)

// FeedPosition is where an all-tenant reader stands in the feed (doc.go, "The
// all-tenant feed"): every range of feed entries up to and including Entry
// has been read, except that when Partial is set the range of Entry itself
// has been read only up to the tenant stream id In. Watermark is a Redis time
// (ms) at which the reader had read the whole feed up to Entry (see
// Position). A position is a few dozen bytes whatever the number of tenants.
type FeedPosition struct {
	Entry     ID
	In        ID
	Partial   bool
	Watermark int64
}

// feedCursorTag starts every all-tenant cursor, so the two kinds of cursor
// can never be mistaken for each other.
const feedCursorTag = "a"

func (p FeedPosition) at() Position { return Position{ID: p.Entry, Watermark: p.Watermark} }

// EncodeFeedCursor is the opaque cursor of p: base64url of
// "a<entry>[~<in>][.<watermark>]".
func EncodeFeedCursor(p FeedPosition) string {
	s := feedCursorTag + p.Entry.String()
	if p.Partial {
		s += "~" + p.In.String()
	}
	return cursor.Encode(withMark(s, p.Entry, p.Watermark))
}

// IsFeedCursor reports whether c has the shape of an all-tenant cursor
// (it may still be invalid).
func IsFeedCursor(c string) bool {
	raw, err := cursor.Decode("cursor", c)
	return err == nil && strings.HasPrefix(raw, feedCursorTag)
}

// DecodeFeedCursor parses a cursor made by EncodeFeedCursor; anything else is
// INVALID_REQUEST naming field.
func DecodeFeedCursor(field, c string) (FeedPosition, error) {
	bad := func() (FeedPosition, error) {
		return FeedPosition{}, apierr.Invalid(field, "is not an all-tenant cursor issued by this server")
	}
	body, mark, ok := cursorParts(field, c, 160)
	if !ok {
		return bad()
	}
	body, ok = strings.CutPrefix(body, feedCursorTag)
	if !ok {
		return bad()
	}
	entryPart, inPart, partial := strings.Cut(body, "~")
	p := FeedPosition{Watermark: mark}
	var err error
	if p.Entry, err = ParseID(entryPart); err != nil {
		return bad()
	}
	if partial {
		if p.In, err = ParseID(inPart); err != nil {
			return bad()
		}
		p.Partial = true
	}
	if EncodeFeedCursor(p) != c {
		return bad()
	}
	return p, nil
}
