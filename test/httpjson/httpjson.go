// Package httpjson holds what tests of cyclesd's HTTP listeners (the Cycles
// HTTP wire, the Connect transcoder) share: one JSON call whose answer must be
// a JSON object, and a body that records whether the server read it.
package httpjson

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Call sends method url with body (as application/json when not empty) and
// header's name/value pairs, within 5 s, and returns the status and the
// decoded answer; an answer that is not a JSON object fails the test.
func Call(tb testing.TB, method, url, body string, header ...string) (int, map[string]any) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		tb.Fatalf("%s %s: %s: body %q is not JSON", method, url, res.Status, raw)
	}
	return res.StatusCode, out
}

// WatchedBody is a request body that records whether anything read it (the
// proof that a refusal came before the body was read).
type WatchedBody struct {
	r    io.Reader
	read bool
}

// NewWatchedBody watches a body of s.
func NewWatchedBody(s string) *WatchedBody { return &WatchedBody{r: strings.NewReader(s)} }

func (b *WatchedBody) Read(p []byte) (int, error) {
	b.read = true
	return b.r.Read(p)
}

// WasRead reports whether any of the body was read.
func (b *WatchedBody) WasRead() bool { return b.read }
