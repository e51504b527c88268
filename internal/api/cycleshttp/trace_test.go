package cycleshttp

import "testing"

// TestParseTraceparent pins the accepted traceparent form: version 00,
// lowercase hex, neither id all zero.
func TestParseTraceparent(t *testing.T) {
	const tid, sid = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"00-" + tid + "-" + sid + "-01", true},
		{"00-" + tid + "-" + sid + "-00", true},
		{"01-" + tid + "-" + sid + "-01", false},
		{"00-4BF92F3577B34DA6A3CE929D0E0E4736-" + sid + "-01", false},
		{"00-" + tid + "-00F067AA0BA902B7-01", false},
		{"00-" + tid + "-" + sid + "-0A", false},
		{"00-00000000000000000000000000000000-" + sid + "-01", false},
		{"00-" + tid + "-0000000000000000-01", false},
		{"00-" + tid + "-" + sid + "-01-", false},
		{"00-" + tid + "-00f067aa0ba902bz-01", false},
	} {
		sc, ok := parseTraceparent(tc.in)
		if ok != tc.ok {
			t.Errorf("parseTraceparent(%q) ok = %v, want %v", tc.in, ok, tc.ok)
			continue
		}
		if ok && (sc.TraceID().String() != tid || sc.SpanID().String() != sid) {
			t.Errorf("parseTraceparent(%q) = %s/%s", tc.in, sc.TraceID(), sc.SpanID())
		}
	}
}
