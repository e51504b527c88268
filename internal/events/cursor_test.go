package events

import (
	"encoding/base64"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/cyclesgo/cycles-go/internal/apierr"
)

func TestCursorRoundTrip(t *testing.T) {
	for _, p := range []Position{
		{ID: ID{MS: 1_767_225_600_123, Seq: 0}},
		{ID: ID{MS: 1, Seq: 18446744073709551615}},
		{ID: ID{}, Watermark: 1_767_225_600_999},
		{ID: ID{MS: 5, Seq: 2}, Watermark: 9},
	} {
		c := EncodeCursor(p)
		got, err := DecodeCursor("cursor", c)
		if err != nil || got != p {
			t.Fatalf("%+v -> %q -> %+v, %v", p, c, got, err)
		}
	}
	// An event's cursor is the base64url of its stream id.
	if c := EncodeCursor(Position{ID: ID{MS: 12, Seq: 3}}); c != base64.RawURLEncoding.EncodeToString([]byte("12-3")) {
		t.Fatalf("cursor %q", c)
	}
}

func TestCursorRejectsGarbage(t *testing.T) {
	enc := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for name, c := range map[string]string{
		"empty":           "",
		"not base64":      "!!!",
		"padded":          base64.URLEncoding.EncodeToString([]byte("12-3")),
		"no dash":         enc("123"),
		"letters":         enc("12-x"),
		"signed":          enc("+12-3"),
		"negative":        enc("-12-3"),
		"leading zero":    enc("012-3"),
		"ms overflow":     enc("18446744073709551616-0"),
		"empty seq":       enc("12-"),
		"stale mark":      enc("12-3.5"),
		"bad mark":        enc("12-3.x"),
		"mark overflow":   enc("12-3.9223372036854775808"),
		"trailing":        enc("12-3 "),
		"too long":        enc(string(make([]byte, 200))),
		"other tenant id": "dGVuYW50OmE",
	} {
		_, err := DecodeCursor("cursor", c)
		ae, ok := apierr.As(err)
		if !ok || ae.Code != apierr.InvalidRequest || ae.Code.GRPCCode() != codes.InvalidArgument || ae.Details["field"] != "cursor" {
			t.Errorf("%s (%q): err %v, want INVALID_REQUEST on field cursor", name, c, err)
		}
	}
}

func TestIDOrderAndNext(t *testing.T) {
	a, _ := ParseID("5-18446744073709551615")
	if n := a.Next(); n != (ID{MS: 6}) {
		t.Fatalf("next of %v = %v", a, n)
	}
	if !(ID{MS: 5, Seq: 1}).Less(ID{MS: 5, Seq: 2}) || (ID{MS: 6}).Less(ID{MS: 5, Seq: 9}) {
		t.Fatal("order")
	}
}
