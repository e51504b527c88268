package server

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/zap"
)

// TestReadyWarnings: /readyz lists the warnings an operator must look at
// (an archive lagging behind) while staying 200 UP; without any, or with
// the replica down, the answer is exactly as before.
func TestReadyWarnings(t *testing.T) {
	cases := []struct {
		name     string
		serving  bool
		warnings func() []string
		code     int
		body     string
	}{
		{"no warning source", true, nil, 200, `{"status":"UP"}`},
		{"nothing to warn about", true, func() []string { return nil }, 200, `{"status":"UP"}`},
		{"archive lag", true, func() []string { return []string{"archive lag 10m0s exceeds 5m0s"} }, 200,
			`{"status":"UP","warnings":["archive lag 10m0s exceeds 5m0s"]}`},
		{"down wins", false, func() []string { return []string{"x"} }, 503, `{"status":"DOWN"}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := New(Options{Logger: zap.NewNop(), Verifier: fakeVerifier{}, AdminKey: adminKey}, Services{})
			t.Cleanup(func() { srv.Stop(time.Second) })
			srv.serving.Store(c.serving)
			h := srv.NewHTTP(HTTPOptions{ReadyWarnings: c.warnings})
			rec := httptest.NewRecorder()
			h.mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
			body, _ := io.ReadAll(rec.Body)
			if rec.Code != c.code || string(body) != c.body {
				t.Fatalf("%d %s, want %d %s", rec.Code, body, c.code, c.body)
			}
		})
	}
}
