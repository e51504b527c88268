package enumkey_test

import (
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/enumkey"
)

func TestOf(t *testing.T) {
	for _, tc := range []struct {
		in   protoreflect.Enum
		want string
	}{
		{cyclesv1.Unit_UNIT_TOKENS, "TOKENS"},
		{cyclesv1.Unit_UNIT_USD_MICROCENTS, "USD_MICROCENTS"},
		{cyclesv1.Unit_UNIT_UNSPECIFIED, ""},
		{cyclesv1.Unit(99), ""},
		{cyclesv1.FundingOperation_FUNDING_OPERATION_RESET_SPENT, "RESET_SPENT"},
		{cyclesv1.CommitOveragePolicy_COMMIT_OVERAGE_POLICY_ALLOW_IF_AVAILABLE, "ALLOW_IF_AVAILABLE"},
		{cyclesv1.ApiKeyStatus_API_KEY_STATUS_REVOKED, "REVOKED"},
	} {
		if got := enumkey.Of(tc.in); got != tc.want {
			t.Errorf("Of(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
