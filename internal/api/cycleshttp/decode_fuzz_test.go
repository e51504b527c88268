package cycleshttp

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/validate"
)

// FuzzReserveBody: whatever the body, decoding, translation and validation
// either produce a valid request or an INVALID_REQUEST/UNIT_MISMATCH-free
// 400 naming a field; never a panic. (The seeds run in every go test.)
func FuzzReserveBody(f *testing.F) {
	for _, s := range []string{
		`{"idempotency_key":"k","subject":{"workspace":"prod"},"action":{"kind":"k","name":"n"},"estimate":{"unit":"TOKENS","amount":1}}`,
		`{"idempotency_key":"k","subject":{"workspace":"prod"},"action":{"kind":"k","name":"n"},"estimate":{"unit":"TOKENS","amount":9223372036854775807},"metadata":{"a":[1,{"b":null}],"c":1e308}}`,
		`{"estimate":{"amount":-9223372036854775808}}`,
		`{"subject":{"dimensions":{"a":1}}}`,
		`{"ttl_ms":1.0}`, `[]`, `null`, `{}`, `{"dry_run":"yes"}`, `{"overage_policy":null}`, `{"metadata":{"x":1e400}}`,
		`{"idempotency_key":"k"}{"idempotency_key":"k"}`, "\x00", `{"a":`,
	} {
		f.Add(s)
	}
	a := &API{maxBody: 4096}
	f.Fuzz(func(t *testing.T, body string) {
		r := httptest.NewRequest(http.MethodPost, "/v1/reservations", strings.NewReader(body))
		req := &cyclesv1.CreateReservationRequest{}
		err := protoJSON(a, httptest.NewRecorder(), r, req)
		if err == nil {
			err = validate.Message(req)
		}
		if err == nil {
			return
		}
		e, ok := apierr.As(err)
		if !ok {
			t.Fatalf("body %q: error %v is not a protocol error", body, err)
		}
		if e.Code != apierr.InvalidRequest || e.Details["field"] == "" {
			t.Fatalf("body %q: %v (details %v), want INVALID_REQUEST naming a field", body, e, e.Details)
		}
	})
}
