package enumkey_test

import (
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/enumkey"
)

// TestOf: the key form drops each enum's own prefix, whatever its length,
// and is "" for UNSPECIFIED and for numbers the enum does not declare.
func TestOf(t *testing.T) {
	for in, want := range map[protoreflect.Enum]string{
		cyclesv1.Unit_UNIT_TOKENS:                                             "TOKENS",
		cyclesv1.Unit_UNIT_USD_MICROCENTS:                                     "USD_MICROCENTS",
		cyclesv1.Unit_UNIT_UNSPECIFIED:                                        "",
		cyclesv1.Unit(99):                                                     "",
		cyclesv1.FundingOperation_FUNDING_OPERATION_RESET_SPENT:               "RESET_SPENT",
		cyclesv1.CommitOveragePolicy_COMMIT_OVERAGE_POLICY_ALLOW_IF_AVAILABLE: "ALLOW_IF_AVAILABLE",
		cyclesv1.ApiKeyStatus_API_KEY_STATUS_REVOKED:                          "REVOKED",
	} {
		if got := enumkey.Of(in); got != want {
			t.Errorf("Of(%v) = %q, want %q", in, got, want)
		}
	}
}

// TestParse: Parse undoes Of for every declared value of an enum, and
// refuses "", UNSPECIFIED, full names and unknown keys.
func TestParse(t *testing.T) {
	for n := range cyclesv1.Unit_name {
		u := cyclesv1.Unit(n)
		got, ok := enumkey.Parse[cyclesv1.Unit](enumkey.Of(u))
		if want := n != 0; ok != want || (ok && got != u) {
			t.Errorf("Parse(Of(%v)) = %v, %v", u, got, ok)
		}
	}
	for _, key := range []string{"", "UNSPECIFIED", "UNIT_TOKENS", "tokens", "NOPE"} {
		if got, ok := enumkey.Parse[cyclesv1.Unit](key); ok || got != 0 {
			t.Errorf("Parse(%q) = %v, %v, want 0, false", key, got, ok)
		}
	}
}
