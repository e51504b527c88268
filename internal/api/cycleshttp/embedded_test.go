package cycleshttp

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
)

// TestDecodeErrorNamesWireField: a type error inside a policy body member
// names the member as the wire spells it, nested members by their path.
func TestDecodeErrorNamesWireField(t *testing.T) {
	a := &API{maxBody: 4096}
	for _, tc := range []struct {
		body, field string
	}{
		{`{"allowed_action_kinds":1}`, "allowed_action_kinds"},
		{`{"action_quotas":[{"max_calls":"x"}]}`, "action_quotas.max_calls"},
		{`{"caps":{"max_tokens":"x"}}`, "caps.max_tokens"},
		{`{"priority":"x"}`, "priority"},
	} {
		t.Run(tc.body, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/v1/admin/policies", strings.NewReader(tc.body))
			err := protoJSON(a, httptest.NewRecorder(), r, &cyclesv1.CreateScopePolicyRequest{})
			e, ok := apierr.As(err)
			if !ok || e.Code != apierr.InvalidRequest {
				t.Fatalf("err %v, want INVALID_REQUEST", err)
			}
			if got := e.Details["field"]; got != tc.field {
				t.Fatalf("field %q, want %q (%v)", got, tc.field, e)
			}
		})
	}
}
