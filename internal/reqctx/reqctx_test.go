package reqctx

import (
	"regexp"
	"strings"
	"testing"
)

func TestRequestIDOrNew(t *testing.T) {
	generated := regexp.MustCompile(`^[0-9a-f]{16}$`)
	for _, tc := range []struct {
		name, in string
		echoed   bool
	}{
		{"plain", "req-42", true},
		{"64 characters", strings.Repeat("a", 64), true},
		{"empty", "", false},
		{"65 characters", strings.Repeat("a", 65), false},
		{"space", "a b", false},
		{"newline (header injection)", "a\r\nX-Evil: 1", false},
		{"tab", "a\tb", false},
	} {
		got := RequestIDOrNew(tc.in)
		if tc.echoed && got != tc.in {
			t.Errorf("%s: %q became %q, want it echoed", tc.name, tc.in, got)
		}
		if !tc.echoed && !generated.MatchString(got) {
			t.Errorf("%s: %q gave %q, want a fresh 16-hex id", tc.name, tc.in, got)
		}
	}
	if a, b := RequestIDOrNew(""), RequestIDOrNew(""); a == b {
		t.Errorf("two fresh ids are equal: %q", a)
	}
	if id := NewTraceID(); !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(id) {
		t.Errorf("trace id %q is not 32 lowercase hex", id)
	}
}
