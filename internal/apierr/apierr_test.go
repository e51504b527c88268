package apierr

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/status"
)

// The cause of an Error is for logs and errors.Is; the status a client gets
// carries only the code and the fixed message.
func TestCauseStaysOutOfTheStatus(t *testing.T) {
	cause := fmt.Errorf("read tcp 127.0.0.1:1->127.0.0.1:6379: %w", context.DeadlineExceeded)
	for _, tc := range []struct {
		name    string
		err     *Error
		public  string
		logText string
	}{
		{"with cause", &Error{Code: Unavailable, Message: "budget store unavailable", Cause: cause},
			"UNAVAILABLE: budget store unavailable", "UNAVAILABLE: budget store unavailable: read tcp 127.0.0.1:1->127.0.0.1:6379: context deadline exceeded"},
		{"without cause", New(BudgetExceeded, "not enough"), "BUDGET_EXCEEDED: not enough", "BUDGET_EXCEEDED: not enough"},
		{"code only", &Error{Code: Unavailable}, "UNAVAILABLE", "UNAVAILABLE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := status.Convert(tc.err.Status("r", "").Err()).Message(); got != tc.public {
				t.Fatalf("status message %q, want %q", got, tc.public)
			}
			if strings.Contains(tc.err.Public(), "127.0.0.1") {
				t.Fatal("public text names an address")
			}
			if got := tc.err.Error(); got != tc.logText {
				t.Fatalf("Error() = %q, want %q", got, tc.logText)
			}
			if (tc.err.Cause != nil) != errors.Is(tc.err, context.DeadlineExceeded) {
				t.Fatal("errors.Is does not follow the cause")
			}
		})
	}
}
