package app

import (
	"strings"
	"testing"
)

// The dev banner shows the HTTP wire too, with curl, at the address the HTTP
// listener uses; none when that listener is off.
func TestDevBannerHTTPExample(t *testing.T) {
	cases := []struct {
		addr string
		want []string
	}{
		{"127.0.0.1:7780", []string{"curl -s", "http://localhost:7780/v1/reservations", "'http://localhost:7780/v1/balances?workspace=prod'", "X-Cycles-API-Key: " + DevAPIKey}},
		{"0.0.0.0:9000", []string{"http://0.0.0.0:9000/v1/reservations"}},
		{"", nil},
	}
	for _, tc := range cases {
		got := httpTry(tc.addr, DevAPIKey)
		if tc.want == nil && got != "" {
			t.Errorf("HTTP off: banner has %q", got)
		}
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("httpTry(%q) lacks %q:\n%s", tc.addr, w, got)
			}
		}
	}
}
