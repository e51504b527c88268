package cycleshttp

import (
	"encoding/json"
	"net/http"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/cyclesgo/cycles-go/internal/apierr"
)

// The codes that have no runtime-spec equivalent keep an honest HTTP status:
// a full or unreachable store is a retryable 503 on both planes, never a 409
// or a 500, and the runtime plane names the real reason in details.
func TestStoreTroubleIsServiceUnavailable(t *testing.T) {
	cases := []struct {
		name   string
		code   apierr.Code
		plane  plane
		wire   string
		reason string
	}{
		{"runtime full", apierr.StoreFull, runtimePlane, "INTERNAL_ERROR", "STORE_FULL"},
		{"admin full", apierr.StoreFull, adminPlane, "STORE_FULL", ""},
		{"runtime unavailable", apierr.Unavailable, runtimePlane, "INTERNAL_ERROR", "UNAVAILABLE"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, body, _ := errorOf(apierr.New(tc.code, "x").Status("rid", "tid").Err(), tc.plane, "rid", "tid")
			if status != http.StatusServiceUnavailable {
				t.Fatalf("status %d, want 503", status)
			}
			if body.Error != tc.wire {
				t.Fatalf("error %q, want %q", body.Error, tc.wire)
			}
			if got, _ := body.Details["reason"].(string); got != tc.reason {
				t.Fatalf("details.reason %q, want %q", got, tc.reason)
			}
		})
	}
}

// A refusal's DenyDetail (ErrorInfo metadata, JSON) becomes details.deny_detail
// as an object with integer amounts, and the v0.1.26 codes are 409s on the
// runtime plane under their own names.
func TestDenyDetailInErrorBody(t *testing.T) {
	for _, code := range []apierr.Code{apierr.ActionQuotaExceeded, apierr.ActionKindNotAllowed, apierr.ActionKindDenied, apierr.BudgetExceeded} {
		e := apierr.New(code, "refused").With("deny_detail",
			`{"reason_code":"`+string(code)+`","blocked_by_scope":"tenant:a","budget_remaining":"-5"}`)
		status, body, _ := errorOf(e.Status("rid", "").Err(), runtimePlane, "rid", "")
		if status != http.StatusConflict || body.Error != string(code) {
			t.Fatalf("%s: status %d error %q", code, status, body.Error)
		}
		if code.GRPCCode() != codes.FailedPrecondition {
			t.Fatalf("%s: gRPC %v", code, code.GRPCCode())
		}
		raw, err := json.Marshal(body.Details["deny_detail"])
		if err != nil {
			t.Fatal(err)
		}
		want := `{"reason_code":"` + string(code) + `","blocked_by_scope":"tenant:a","budget_remaining":-5}`
		if string(raw) != want {
			t.Fatalf("%s: deny_detail %s, want %s", code, raw, want)
		}
	}
}
