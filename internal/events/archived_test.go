package events

import (
	"context"
	"testing"
	"time"

	"github.com/cyclesgo/cycles-go/internal/apierr"
)

// TestGone: without an archive a position is judged against Redis's oldest
// entry and -event-retention (as before); with one, only a read below
// Redis's oldest entry from a position older than the archive's retention
// is CURSOR_EXPIRED, and an unknown archive retention refuses nothing.
func TestGone(t *testing.T) {
	day := 24 * time.Hour
	now := int64(1_000 * day / time.Millisecond)
	old := Position{ID: ID{MS: uint64(now - (500 * day).Milliseconds())}}
	recent := Position{ID: ID{MS: uint64(now - (10 * day).Milliseconds())}}
	at := func(p Position) string { return p.ID.Next().String() }
	first := ID{MS: uint64(now - day.Milliseconds())}.String()
	archive := func(context.Context, string, bool, string, string, int) ([][]string, error) { return nil, nil }
	cases := []struct {
		name     string
		archived bool
		keep     time.Duration // archive retention
		p        Position
		from     string
		first    string
		want     bool
	}{
		{"no archive, behind Redis retention", false, 0, recent, at(recent), first, true},
		{"no archive, Redis empty", false, 0, recent, at(recent), "", false},
		{"no archive, at Redis's oldest", false, 0, Position{ID: ID{MS: uint64(now-day.Milliseconds()) - 1}}, first, first, false},
		{"archive, within its retention", true, 400 * day, recent, at(recent), first, false},
		{"archive, past its retention", true, 400 * day, old, at(old), first, true},
		{"archive, past its retention, Redis empty", true, 400 * day, old, at(old), "", true},
		{"archive, old position but reading Redis", true, 400 * day, old, first, first, false},
		{"archive, retention unknown", true, 0, old, at(old), first, false},
		{"archive, fresh watermark", true, 400 * day, Position{ID: old.ID, Watermark: now - 1000}, at(old), first, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{Retention: 7 * day, ArchiveRetention: tc.keep}
			if tc.archived {
				o.ArchivedStream = archive
			}
			s := New(nil, o)
			err := s.gone(context.Background(), "test", tc.p, tc.from, tc.first, now)
			if got := err != nil; got != tc.want {
				t.Fatalf("gone = %v, want %v", err, tc.want)
			}
			if err != nil && !apierr.HasCode(err, ReasonCursorExpired) {
				t.Fatalf("gone = %v, want CURSOR_EXPIRED", err)
			}
		})
	}
}
