package events

import (
	"encoding/base64"
	"testing"
)

func TestFeedCursorRoundTripAndKinds(t *testing.T) {
	for _, p := range []FeedPosition{
		{},
		{Entry: ID{MS: 1_767_225_600_123, Seq: 4}},
		{Entry: ID{MS: 7, Seq: 1}, In: ID{MS: 5, Seq: 18446744073709551615}, Partial: true},
		{Entry: ID{MS: 7}, Watermark: 1_767_225_600_999},
		{Entry: ID{MS: 7}, In: ID{}, Partial: true, Watermark: 9},
	} {
		c := EncodeFeedCursor(p)
		got, err := DecodeFeedCursor("cursor", c)
		if err != nil || got != p {
			t.Fatalf("%+v -> %q -> %+v, %v", p, c, got, err)
		}
		if !IsFeedCursor(c) {
			t.Fatalf("%q not recognised as a feed cursor", c)
		}
		// A feed cursor is never a tenant cursor, and the other way round.
		if _, err := DecodeCursor("cursor", c); err == nil {
			t.Fatalf("feed cursor %q accepted as a tenant cursor", c)
		}
		if len(c) > 100 {
			t.Fatalf("cursor of %d bytes", len(c))
		}
	}
	tc := EncodeCursor(Position{ID: ID{MS: 12, Seq: 3}})
	if _, err := DecodeFeedCursor("cursor", tc); err == nil || IsFeedCursor(tc) {
		t.Fatalf("tenant cursor %q accepted as a feed cursor", tc)
	}
	enc := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for _, bad := range []string{"", enc("a"), enc("a1-2~"), enc("a1-2~x"), enc("a01-2"), enc("a1-2.0"), enc("a1-2.1"), enc("b1-2"), enc("a1-2~3-4~5-6")} {
		if _, err := DecodeFeedCursor("cursor", bad); err == nil {
			t.Fatalf("garbage %q accepted", bad)
		}
	}
}
