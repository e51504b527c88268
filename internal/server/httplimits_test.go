package server

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestLimitBody(t *testing.T) {
	var read int
	var readErr error
	h := LimitBody(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		read, readErr = len(b), err
		if err != nil {
			http.Error(w, "too large", http.StatusRequestEntityTooLarge)
		}
	}), 1024)
	cases := []struct {
		name      string
		body      string
		chunked   bool
		code      int
		handlerOK bool
	}{
		{"within", strings.Repeat("a", 1024), false, http.StatusOK, true},
		{"declared too long: refused before the handler", strings.Repeat("a", 4096), false, http.StatusBadRequest, false},
		{"undeclared too long: the read fails at the limit", strings.Repeat("a", 4096), true, http.StatusRequestEntityTooLarge, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			read, readErr = -1, nil
			req := httptest.NewRequest(http.MethodPost, "/x", strings.NewReader(tc.body))
			if tc.chunked {
				req.ContentLength = -1
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.code {
				t.Fatalf("code = %d, want %d", rec.Code, tc.code)
			}
			if tc.handlerOK && (readErr != nil || read != len(tc.body)) {
				t.Fatalf("read %d, %v", read, readErr)
			}
			if !tc.chunked && !tc.handlerOK && read != -1 {
				t.Fatal("the handler ran for a body declared too long")
			}
			if tc.chunked && read > 1024 {
				t.Fatalf("read %d bytes past the limit", read)
			}
		})
	}
}
