package cursor

import (
	"errors"
	"strings"
	"testing"

	"github.com/cyclesgo/cycles-go/internal/apierr"
)

func TestRoundTrip(t *testing.T) {
	for _, pos := range []string{"", "tenant:acme/workspace:prod|USD_MICROCENTS", "1700000000000-3 t:acme:audit", "a b\x00c"} {
		got, err := Decode("cursor", Encode(pos))
		if err != nil || got != pos {
			t.Errorf("Decode(Encode(%q)) = %q, %v", pos, got, err)
		}
	}
	type position struct {
		Tenant string `json:"t"`
		Score  int64  `json:"s"`
	}
	in := position{Tenant: "acme", Score: 1<<62 + 1}
	var out position
	if err := DecodeJSON("page_token", EncodeJSON(in), &out); err != nil || out != in {
		t.Errorf("DecodeJSON(EncodeJSON(%+v)) = %+v, %v", in, out, err)
	}
}

func TestRefusals(t *testing.T) {
	for _, tc := range []struct {
		name, c string
		json    bool
	}{
		{"not base64url", "a+b/", false},
		{"padded", Encode("ab") + "==", false},
		{"too long", strings.Repeat("A", MaxLen+1), false},
		{"not JSON", Encode("{"), true},
		{"JSON of another shape", Encode(`["x"]`), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.json {
				var v struct{ T string }
				err = DecodeJSON("next", tc.c, &v)
			} else {
				_, err = Decode("next", tc.c)
			}
			var ae *apierr.Error
			if !errors.As(err, &ae) || ae.Details["field"] != "next" {
				t.Fatalf("err = %v, want INVALID_REQUEST naming next", err)
			}
		})
	}
}
