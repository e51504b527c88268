package apierr

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
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

// Every form an error reaches a wire in has one code, and every code one
// HTTP status, from the tables in this package.
func TestCodeOfAndHTTPStatus(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    error
		code   Code
		status int
	}{
		{"domain error", New(BudgetExceeded, "no"), BudgetExceeded, 409},
		{"wrapped domain error", fmt.Errorf("reserve: %w", Invalid("x", "bad")), InvalidRequest, 400},
		{"status with ErrorInfo", New(TenantNotFound, "no").Status("r", "t").Err(), TenantNotFound, 404},
		{"store full", New(StoreFull, "full").Status("", "").Err(), StoreFull, 503},
		{"unavailable", New(Unavailable, "down").Status("", "").Err(), Unavailable, 503},
		{"bare unauthenticated", status.Error(codes.Unauthenticated, "no key"), Unauthorized, 401},
		{"bare permission denied", status.Error(codes.PermissionDenied, "no"), Forbidden, 403},
		{"bare invalid argument", status.Error(codes.InvalidArgument, "bad"), InvalidRequest, 400},
		{"bare deadline", status.Error(codes.DeadlineExceeded, "late"), Unavailable, 503},
		{"context canceled", fmt.Errorf("call: %w", context.Canceled), Unavailable, 503},
		{"bare internal", status.Error(codes.Internal, "boom"), InternalError, 500},
		{"plain error", errors.New("boom"), InternalError, 500},
		{"pending", New(IdempotencyPending, "wait").Status("", "").Err(), IdempotencyPending, 500},
		{"expired", New(ReservationExpired, "gone").Status("", "").Err(), ReservationExpired, 410},
		{"limit", New(LimitExceeded, "slow down").Status("", "").Err(), LimitExceeded, 429},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code := CodeOf(tc.err)
			if code != tc.code || code.HTTPStatus() != tc.status {
				t.Fatalf("CodeOf = %s (HTTP %d), want %s (HTTP %d)", code, code.HTTPStatus(), tc.code, tc.status)
			}
		})
	}
}

// The runtime vocabulary is closed: its codes stay, every other code folds
// onto the one a Cycles client already handles.
func TestRuntimeVocabulary(t *testing.T) {
	for _, tc := range []struct {
		code, want Code
		kept       bool
	}{
		{BudgetExceeded, BudgetExceeded, true},
		{ActionKindDenied, ActionKindDenied, true},
		{Overflow, InvalidRequest, false},
		{TenantSuspended, Forbidden, false},
		{KeyNotFound, NotFound, false},
		{Unavailable, InternalError, false},
		{IdempotencyPending, InternalError, false},
	} {
		if got, kept := tc.code.Runtime(); got != tc.want || kept != tc.kept {
			t.Errorf("%s.Runtime() = %s, %v; want %s, %v", tc.code, got, kept, tc.want, tc.kept)
		}
	}
}
