package cycleshttp

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cyclesgo/cycles-go/internal/apierr"
)

// TestDecodeErrorNamesWireField: a type error inside a body member that the
// wire type takes from an embedded struct (policyIn embeds governanceIn) names
// the member as the wire spells it. encoding/json puts the embedded struct's
// Go name in the path ("governanceIn.allowed_action_kinds"), which no client
// could match to its request.
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
			var in policyIn
			err := a.decodeJSON(httptest.NewRecorder(), r, &in)
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
