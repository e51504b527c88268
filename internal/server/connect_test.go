package server

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.uber.org/zap"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/test/httpjson"
)

// startConnect serves the fake services on an HTTP listener with Connect mounted.
func startConnect(t *testing.T, rt *fakeRuntime, maxBody int64, corsOrigins ...string) string {
	t.Helper()
	return startConnectOn(t, rt, HTTPOptions{}, maxBody, corsOrigins...)
}

func startConnectOn(t *testing.T, rt *fakeRuntime, opts HTTPOptions, maxBody int64, corsOrigins ...string) string {
	t.Helper()
	srv := New(Options{
		Logger:         zap.NewNop(),
		Verifier:       fakeVerifier{key: "good-key", tenant: "acme"},
		AdminKey:       adminKey,
		RequestTimeout: 2 * time.Second,
	}, Services{Runtime: rt, Admin: fakeAdmin{}})
	t.Cleanup(func() { srv.Stop(time.Second) })
	h := srv.NewHTTP(opts)
	if err := h.MountConnect(maxBody, corsOrigins...); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(h.mux)
	t.Cleanup(ts.Close)
	return ts.URL
}

// TestConnectRunsTheGRPCInterceptorChain proves the transcoder hands calls
// to the gRPC server itself: auth refuses a missing or wrong key, a good key
// reaches the handler with its principal, and errors keep their ErrorInfo.
func TestConnectRunsTheGRPCInterceptorChain(t *testing.T) {
	rt := &fakeRuntime{}
	base := startConnect(t, rt, 0)
	url := base + "/cycles.v1.RuntimeService/GetReservation"

	cases := []struct {
		name       string
		header     []string
		id         string
		wantHTTP   int
		wantCode   string
		wantReason string
	}{
		{"missing key", nil, "r1", http.StatusUnauthorized, "unauthenticated", "UNAUTHORIZED"},
		{"wrong key", []string{auth.APIKeyHeader, "nope"}, "r1", http.StatusUnauthorized, "unauthenticated", "UNAUTHORIZED"},
		{"admin key on the runtime plane", []string{auth.AdminKeyHeader, adminKey}, "r1", http.StatusUnauthorized, "unauthenticated", "UNAUTHORIZED"},
		{"validation before the handler", []string{auth.APIKeyHeader, "good-key"}, "", http.StatusBadRequest, "invalid_argument", "INVALID_REQUEST"},
		{"domain refusal", []string{auth.APIKeyHeader, "good-key"}, "budget", http.StatusBadRequest, "failed_precondition", "BUDGET_EXCEEDED"},
		{"panic recovered", []string{auth.APIKeyHeader, "good-key"}, "panic", http.StatusInternalServerError, "internal", "INTERNAL_ERROR"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			url := url
			if strings.HasPrefix(tc.name, "admin key") { // a tenant-only method (GetReservation takes the admin key on a tenant's behalf)
				url = base + "/cycles.v1.RuntimeService/CommitReservation"
			}
			code, body := httpjson.Call(t, http.MethodPost, url, `{"reservation_id":"`+tc.id+`"}`, tc.header...)
			if code != tc.wantHTTP || body["code"] != tc.wantCode {
				t.Fatalf("got HTTP %d %v, want %d %s", code, body, tc.wantHTTP, tc.wantCode)
			}
			details, _ := body["details"].([]any)
			if len(details) == 0 {
				t.Fatalf("no details in %v", body)
			}
			d := details[0].(map[string]any)
			debug, _ := d["debug"].(map[string]any)
			if d["type"] != "google.rpc.ErrorInfo" || debug["reason"] != tc.wantReason || debug["domain"] != "cycles" {
				t.Fatalf("want ErrorInfo %s, got %v", tc.wantReason, d)
			}
		})
	}

	code, body := httpjson.Call(t, http.MethodPost, url, `{"reservation_id":"r-7"}`, auth.APIKeyHeader, "good-key")
	if code != http.StatusOK || body["reservation"].(map[string]any)["reservationId"] != "r-7" {
		t.Fatalf("good call: HTTP %d %v", code, body)
	}
	if rt.seen.Tenant != "acme" {
		t.Fatalf("handler saw principal %+v, want tenant acme", rt.seen)
	}
}

// TestConnectGoClientAndGRPCWeb calls through connect-go's own client over
// the Connect and gRPC-Web protocols and reads ErrorInfo from the error.
func TestConnectGoClientAndGRPCWeb(t *testing.T) {
	base := startConnect(t, &fakeRuntime{}, 0)
	for _, proto := range []struct {
		name string
		opts []connect.ClientOption
	}{
		{"connect+proto", nil},
		{"connect+json", []connect.ClientOption{connect.WithProtoJSON()}},
		{"grpc-web", []connect.ClientOption{connect.WithGRPCWeb()}},
	} {
		t.Run(proto.name, func(t *testing.T) {
			client := connect.NewClient[cyclesv1.GetReservationRequest, cyclesv1.GetReservationResponse](
				http.DefaultClient, base+"/cycles.v1.RuntimeService/GetReservation", proto.opts...)
			req := connect.NewRequest(&cyclesv1.GetReservationRequest{ReservationId: "r-9"})
			req.Header().Set(auth.APIKeyHeader, "good-key")
			res, err := client.CallUnary(context.Background(), req)
			if err != nil || res.Msg.GetReservation().GetReservationId() != "r-9" {
				t.Fatalf("call: %v %v", res, err)
			}
			bad := connect.NewRequest(&cyclesv1.GetReservationRequest{ReservationId: "budget"})
			bad.Header().Set(auth.APIKeyHeader, "good-key")
			_, err = client.CallUnary(context.Background(), bad)
			var cerr *connect.Error
			if !errors.As(err, &cerr) || cerr.Code() != connect.CodeFailedPrecondition {
				t.Fatalf("want failed_precondition, got %v", err)
			}
			var info *errdetails.ErrorInfo
			for _, d := range cerr.Details() {
				if m, err := d.Value(); err == nil {
					if ei, ok := m.(*errdetails.ErrorInfo); ok {
						info = ei
					}
				}
			}
			if info.GetReason() != "BUDGET_EXCEEDED" || info.GetMetadata()["scope"] != "tenant:a" {
				t.Fatalf("want BUDGET_EXCEEDED with scope metadata, got %v", info)
			}
		})
	}
}

func TestConnectBodyLimit(t *testing.T) {
	big := `{"reservation_id":"` + strings.Repeat("x", 4096) + `"}`
	// The limit given to MountConnect, else the listener's body limit
	// (-http-max-body-bytes), the one every HTTP route has.
	for name, start := range map[string]func(*fakeRuntime) string{
		"explicit": func(rt *fakeRuntime) string { return startConnect(t, rt, 1024) },
		"listener": func(rt *fakeRuntime) string { return startConnectOn(t, rt, HTTPOptions{MaxBodyBytes: 1024}, 0) },
	} {
		rt := &fakeRuntime{}
		base := start(rt)
		code, body := httpjson.Call(t, http.MethodPost, base+"/cycles.v1.RuntimeService/GetReservation", big, auth.APIKeyHeader, "good-key")
		// Refused before any handler, in each protocol's own terms (Connect:
		// resource_exhausted; gRPC-Web would get grpc-status 8).
		if code != http.StatusTooManyRequests || body["code"] != "resource_exhausted" {
			t.Fatalf("%s: an over-limit body: HTTP %d %v", name, code, body)
		}
		if rt.seen.Tenant != "" {
			t.Fatalf("%s: the handler ran for an over-limit body", name)
		}
	}
	base := startConnect(t, &fakeRuntime{}, 0)
	// Unknown paths are not swallowed by the Connect routes.
	res, err := http.Post(base+"/cycles.v1.NoSuchService/X", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if res.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown service: HTTP %d", res.StatusCode)
	}
}

func TestConnectCORS(t *testing.T) {
	base := startConnect(t, &fakeRuntime{}, 0, "https://app.example")
	url := base + "/cycles.v1.RuntimeService/GetReservation"
	// preflight answers the status and headers (the body is closed here).
	preflight := func(origin string) (int, http.Header) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodOptions, url, nil)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		req.Header.Set("Access-Control-Request-Headers", "content-type,x-cycles-api-key")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
		return res.StatusCode, res.Header
	}
	code, h := preflight("https://app.example")
	if code != http.StatusNoContent || h.Get("Access-Control-Allow-Origin") != "https://app.example" ||
		!strings.Contains(h.Get("Access-Control-Allow-Headers"), "X-Cycles-Api-Key") {
		t.Fatalf("allowed preflight: %d %v", code, h)
	}
	if _, h := preflight("https://evil.example"); h.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("other origin allowed: %v", h)
	}

	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"reservation_id":"budget"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Origin", "https://app.example")
	req.Header.Set(auth.APIKeyHeader, "good-key")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	exposed := res.Header.Get("Access-Control-Expose-Headers")
	if res.Header.Get("Access-Control-Allow-Origin") != "https://app.example" ||
		!strings.Contains(exposed, "Grpc-Status-Details-Bin") || !strings.Contains(exposed, "X-Request-Id") {
		t.Fatalf("actual request: %v", res.Header)
	}
}

// Connect and gRPC-Web calls get the tap's checks before their body is
// read, as native gRPC calls do (the transcoder's path into the gRPC server
// runs no tap); a call with a good key is read and served (the control).
func TestConnectRefusesBeforeTheBodyIsRead(t *testing.T) {
	srv := New(Options{
		Logger:         zap.NewNop(),
		Verifier:       fakeVerifier{key: "good-key", tenant: "acme"},
		AdminKey:       adminKey,
		RequestTimeout: 2 * time.Second,
	}, Services{Runtime: &fakeRuntime{}, Admin: fakeAdmin{}})
	t.Cleanup(srv.GRPC.Stop)
	h := srv.NewHTTP(HTTPOptions{})
	if err := h.MountConnect(0); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name        string
		contentType string
		header      []string
		wantRead    bool
		wantStatus  int
	}{
		{"connect JSON, no key", "application/json", nil, false, http.StatusUnauthorized},
		{"connect JSON, admin key on the runtime plane", "application/json", []string{auth.AdminKeyHeader, adminKey}, false, http.StatusUnauthorized},
		{"gRPC-Web, no key", "application/grpc-web+proto", nil, false, 0},
		{"connect JSON, good key", "application/json", []string{auth.APIKeyHeader, "good-key"}, true, http.StatusOK},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wb := httpjson.NewWatchedBody(`{"reservation_id":"r1"}`)
			path := "/cycles.v1.RuntimeService/GetReservation"
			if strings.Contains(tc.name, "admin key") { // a tenant-only method (GetReservation takes the admin key on a tenant's behalf)
				path = "/cycles.v1.RuntimeService/CommitReservation"
			}
			req := httptest.NewRequest(http.MethodPost, path, wb)
			req.Header.Set("Content-Type", tc.contentType)
			for i := 0; i+1 < len(tc.header); i += 2 {
				req.Header.Set(tc.header[i], tc.header[i+1])
			}
			rec := httptest.NewRecorder()
			h.mux.ServeHTTP(rec, req)
			if wb.WasRead() != tc.wantRead {
				t.Fatalf("body read = %v, want %v (HTTP %d %s %v)", wb.WasRead(), tc.wantRead, rec.Code, rec.Body, rec.Header())
			}
			if tc.wantStatus != 0 && rec.Code != tc.wantStatus {
				t.Fatalf("HTTP %d, want %d: %s", rec.Code, tc.wantStatus, rec.Body)
			}
			if !tc.wantRead && !strings.Contains(rec.Body.String()+rec.Header().Get("Grpc-Status"), "unauthenticated") &&
				rec.Header().Get("Grpc-Status") != "16" {
				t.Fatalf("refusal not unauthenticated: HTTP %d %s %v", rec.Code, rec.Body, rec.Header())
			}
		})
	}
}
