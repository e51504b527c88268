package cycleshttp

import (
	"net/http"
	"testing"

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
