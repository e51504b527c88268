package events

import (
	"testing"

	"github.com/cyclesgo/cycles-go/internal/apierr"
)

// FuzzDecodeCursor: any client-supplied cursor is either refused with
// INVALID_REQUEST naming the field, or is the one canonical encoding of the
// position it decodes to (so a cursor cannot smuggle anything else).
func FuzzDecodeCursor(f *testing.F) {
	for _, p := range []Position{
		{ID: ID{MS: 1_767_225_600_123, Seq: 0}},
		{ID: ID{MS: 5, Seq: 2}, Watermark: 9},
		{ID: ID{}, Watermark: 1},
	} {
		f.Add(EncodeCursor(p))
	}
	f.Add("")
	f.Add("MTItMw")      // 12-3
	f.Add("MTItMy41")    // 12-3.5 (stale watermark: not canonical)
	f.Add("MDEyLTM")     // 012-3
	f.Add("dGVuYW50OmE") // tenant:a
	f.Add("MTItMw==")    // padded
	f.Fuzz(func(t *testing.T, c string) {
		p, err := DecodeCursor("cursor", c)
		if err != nil {
			ae, ok := apierr.As(err)
			if !ok || ae.Code != apierr.InvalidRequest || ae.Details["field"] != "cursor" {
				t.Fatalf("DecodeCursor(%q): %v, want INVALID_REQUEST on field cursor", c, err)
			}
			return
		}
		if again := EncodeCursor(p); again != c {
			t.Fatalf("DecodeCursor(%q) = %+v, which encodes as %q", c, p, again)
		}
		if p.Watermark < 0 {
			t.Fatalf("DecodeCursor(%q): negative watermark %d", c, p.Watermark)
		}
	})
}

// FuzzCursorRoundTrip: every position the server can issue decodes back to
// itself (the watermark is kept only when it says more than the id).
func FuzzCursorRoundTrip(f *testing.F) {
	f.Add(uint64(1_767_225_600_123), uint64(0), int64(0))
	f.Add(uint64(5), uint64(18446744073709551615), int64(9))
	f.Add(uint64(18446744073709551615), uint64(1), int64(9223372036854775807))
	f.Fuzz(func(t *testing.T, ms, seq uint64, mark int64) {
		p := Position{ID: ID{MS: ms, Seq: seq}, Watermark: mark}
		c := EncodeCursor(p)
		got, err := DecodeCursor("cursor", c)
		if err != nil {
			t.Fatalf("issued cursor %q for %+v is refused: %v", c, p, err)
		}
		want := p
		if !(mark > 0 && mark > int64(ms)) {
			want.Watermark = 0
		}
		if got != want {
			t.Fatalf("%+v -> %q -> %+v, want %+v", p, c, got, want)
		}
	})
}
