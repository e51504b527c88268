package abuse

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/test/crash/cyclesdtest"
)

// errorInfo is the ErrorInfo of a gRPC error (nil without one).
func errorInfo(err error) *errdetails.ErrorInfo {
	for _, d := range status.Convert(err).Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei
		}
	}
	return nil
}

// TestLimitAnswersAreConsistent: issue 23 "inconsistent limit answers",
// each checked on the real binary against what docs/limits.md states.
func TestLimitAnswersAreConsistent(t *testing.T) {
	d := Start(t, "-auth-fail-burst", "5")
	tn := d.Tenant(t, "limits")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	big := strings.Repeat("x", 1<<20+1024) // over -max-recv-msg-bytes (1 MiB)

	t.Run("gRPC message over 1 MiB: grpc-go's own RESOURCE_EXHAUSTED, as documented", func(t *testing.T) {
		// grpc-go reads and refuses the message before any handler or
		// interceptor, and writes that status itself (its serverStream's
		// RecvMsg), so it carries no ErrorInfo (docs/limits.md).
		rt := cyclesv1.NewRuntimeServiceClient(d.conn)
		_, rerr := rt.CreateReservation(cyclesdtest.KeyCtx(ctx, tn.Key), &cyclesv1.CreateReservationRequest{
			IdempotencyKey: "big", Subject: &cyclesv1.Subject{Workspace: "w"},
			Action: &cyclesv1.Action{Kind: "llm.completion", Name: big}})
		_, herr := healthpb.NewHealthClient(d.conn).Check(ctx, &healthpb.HealthCheckRequest{Service: big})
		for name, err := range map[string]error{"CreateReservation": rerr, "Health/Check": herr} {
			if status.Code(err) != codes.ResourceExhausted || !strings.Contains(status.Convert(err).Message(), "received message larger than max") {
				t.Errorf("%s: %v; want RESOURCE_EXHAUSTED, received message larger than max", name, err)
			}
			if ei := errorInfo(err); ei != nil {
				t.Logf("%s now carries ErrorInfo %v: update docs/limits.md", name, ei)
			}
		}
	})

	t.Run("a header over 16 KiB is refused and the connection stays usable", func(t *testing.T) {
		// A grpc-go client reads the server's SETTINGS_MAX_HEADER_LIST_SIZE
		// and refuses to send it (INTERNAL); what a raw client's frames get
		// is docs/limits.md's row (stream reset, or the connection ends for
		// a single value over the limit).
		c := d.Conn(t)
		hctx := metadata.AppendToOutgoingContext(ctx, "x-big", strings.Repeat("h", 17<<10))
		_, err := healthpb.NewHealthClient(c).Check(hctx, &healthpb.HealthCheckRequest{})
		if err == nil {
			t.Fatal("a 17 KB header value was accepted (limit 16 KiB)")
		}
		t.Logf("17 KB header value: %v", err)
		// A header list over the limit in values under it resets only
		// that stream.
		lctx := ctx
		for i := range 3 {
			lctx = metadata.AppendToOutgoingContext(lctx, fmt.Sprintf("x-part-%d", i), strings.Repeat("h", 6<<10))
		}
		_, err = healthpb.NewHealthClient(c).Check(lctx, &healthpb.HealthCheckRequest{})
		if err == nil {
			t.Fatal("an 18 KB header list was accepted (limit 16 KiB)")
		}
		t.Logf("18 KB header list: %v", err)
		if _, err := healthpb.NewHealthClient(c).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("the same client afterwards: %v", err)
		}
	})

	t.Run("HTTP body over 1 MiB: 400 INVALID_REQUEST, field=body", func(t *testing.T) {
		// Raw sockets: the server answers (and closes) before it has read
		// the body, so a client that must finish writing first would only
		// see the reset.
		body := `{"idempotency_key":"` + big + `"}`
		for _, framing := range []string{
			"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body,
			"Transfer-Encoding: chunked\r\n\r\n" + strconv.FormatInt(int64(len(body)), 16) + "\r\n" + body + "\r\n0\r\n\r\n",
		} {
			name, _, _ := strings.Cut(framing, ":")
			c, err := net.DialTimeout("tcp", d.HTTPAddr, 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			go func() {
				_, _ = io.WriteString(c, "POST /v1/reservations HTTP/1.1\r\nHost: cyclesd\r\nX-Cycles-API-Key: "+tn.Key+
					"\r\nContent-Type: application/json\r\n"+framing)
			}()
			res, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				c.Close()
				t.Fatalf("%s: no answer: %v", name, err)
			}
			raw, _ := io.ReadAll(res.Body)
			res.Body.Close()
			c.Close()
			var out struct {
				Error   string            `json:"error"`
				Details map[string]string `json:"details"`
			}
			if res.StatusCode != http.StatusBadRequest || json.Unmarshal(raw, &out) != nil || out.Error != "INVALID_REQUEST" || out.Details["field"] != "body" ||
				!strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
				t.Errorf("%s: %s %s %q; want 400 INVALID_REQUEST with field=body in JSON", name, res.Status, res.Header.Get("Content-Type"), raw)
			}
		}
	})

	t.Run("HTTP 429 carries Retry-After", func(t *testing.T) {
		var last *http.Response
		var raw []byte
		for i := 0; i < 20 && (last == nil || last.StatusCode != http.StatusTooManyRequests); i++ {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.HTTPAddr+"/v1/balances?tenant=limits", nil)
			req.Header.Set("X-Cycles-API-Key", "cyc_live_"+strings.Repeat("0", 40)) // well-formed, wrong
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ = io.ReadAll(res.Body)
			res.Body.Close()
			last = res
		}
		if last.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("20 failed authentications with -auth-fail-burst 5 never got 429: last %s %s", last.Status, raw)
		}
		if s, err := strconv.Atoi(last.Header.Get("Retry-After")); err != nil || s < 1 {
			t.Errorf("429 with Retry-After %q; want whole seconds >= 1", last.Header.Get("Retry-After"))
		}
		var out struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(raw, &out) != nil || out.Error == "" {
			t.Errorf("429 body %q is not the JSON error", raw)
		}
	})
}
