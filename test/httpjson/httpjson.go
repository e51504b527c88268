// Package httpjson holds what tests of cyclesd's HTTP listeners (the Cycles
// HTTP wire, the Connect transcoder) share: serving a listener on a loopback
// port, one JSON call whose answer must be a JSON object, a raw exchange and
// its exact decoding, and a body that records whether the server read it.
package httpjson

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
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
	r := Do(tb, NewRequest(tb, method, url, body, header...).WithContext(ctx))
	var out map[string]any
	if err := json.Unmarshal(r.Body, &out); err != nil {
		tb.Fatalf("%s %s: %d: body %q is not JSON", method, url, r.Status, r.Body)
	}
	return r.Status, out
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

// Reply is one HTTP answer, its body read whole.
type Reply struct {
	Status int
	Header http.Header
	Body   []byte
}

// Object decodes body as one JSON object with numbers kept exact
// (json.Number: money never passes through float64); anything else fails the
// test.
func Object(tb testing.TB, body []byte) map[string]any {
	tb.Helper()
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		tb.Fatalf("body is not a JSON object: %v: %s", err, body)
	}
	return m
}

// NewRequest builds method url with body (as application/json when not
// empty) and header's name/value pairs.
func NewRequest(tb testing.TB, method, url, body string, header ...string) *http.Request {
	tb.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		tb.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return req
}

// Do sends req and reads the whole answer; a failed exchange fails the test.
func Do(tb testing.TB, req *http.Request) Reply {
	tb.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return Reply{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// Server is an HTTP server a test can serve and stop (cyclesd's
// server.HTTPServer).
type Server interface {
	Serve(net.Listener) error
	Shutdown(context.Context)
}

// Serve serves s on a fresh loopback port until the test ends (then shuts it
// down within 5 s) and returns its base URL, "http://127.0.0.1:port".
func Serve(tb testing.TB, s Server) string {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go func() { _ = s.Serve(lis) }()
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	return "http://" + lis.Addr().String()
}
