package cycleshttp_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cyclesgo/cycles-go/internal/api/cycleshttp"
	"github.com/cyclesgo/cycles-go/internal/api/runtimeapi"
	"github.com/cyclesgo/cycles-go/internal/ledger"
	"github.com/cyclesgo/cycles-go/internal/server"
	"github.com/cyclesgo/cycles-go/test/grpctest"
	"github.com/cyclesgo/cycles-go/test/httpjson"
	"github.com/cyclesgo/cycles-go/test/scripttest"
)

// A caller without valid credentials costs no body read: the shell's
// pre-auth runs before the route decodes anything (docs/limits.md). A caller
// with a key gets its body read (the control that makes the test fail-able).
func TestRefusedBeforeTheBodyIsRead(t *testing.T) {
	ex := scripttest.Shared(t)
	rt := runtimeapi.New(ledger.New(ex, ledger.Options{}))
	srv := server.New(server.Options{Verifier: grpctest.Verifier{}, AdminKey: grpctest.AdminKey, RequestTimeout: 5 * time.Second},
		server.Services{Runtime: rt})
	t.Cleanup(srv.GRPC.Stop)
	api := cycleshttp.New(cycleshttp.Options{Invoker: srv, Services: server.Services{Runtime: rt}})
	body := `{"idempotency_key":"k1","subject":{"tenant":"acme"},"action":{"kind":"llm","name":"m"},"estimate":{"unit":"TOKENS","amount":1}}`

	cases := []struct {
		name     string
		header   map[string]string
		wantRead bool
		status   int
	}{
		{"no credentials", nil, false, http.StatusUnauthorized},
		{"wrong admin key", map[string]string{"X-Admin-API-Key": "not-the-admin-key-0123456789"}, false, http.StatusUnauthorized},
		{"a key", map[string]string{"X-Cycles-API-Key": grpctest.APIKey("acme")}, true, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wb := httpjson.NewWatchedBody(body)
			req := httptest.NewRequest(http.MethodPost, "/v1/reservations", wb)
			req.Header.Set("Content-Type", "application/json")
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			rec := httptest.NewRecorder()
			api.ServeHTTP(rec, req)
			if wb.WasRead() != tc.wantRead {
				t.Fatalf("body read = %v, want %v (status %d %s)", wb.WasRead(), tc.wantRead, rec.Code, rec.Body)
			}
			if tc.status != 0 && rec.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.status, rec.Body)
			}
			if !tc.wantRead && (!strings.Contains(rec.Body.String(), `"error":"UNAUTHORIZED"`) || rec.Header().Get("X-Request-Id") == "") {
				t.Fatalf("refusal body/headers: %s %v", rec.Body, rec.Header())
			}
		})
	}
}
