package abuse

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/test/crash/cyclesdtest"
)

// TestStoreDownHidesInternalAddress: issue 23 weak spot "error texts". With
// Redis frozen (a read times out: "read tcp 127.0.0.1:…->127.0.0.1:<port>:
// i/o timeout") or gone (the dial is refused), a tenant's reserve and
// balance calls fail on both wires with a fixed text that names no address,
// port or socket; cyclesd's log keeps the cause with the address.
func TestStoreDownHidesInternalAddress(t *testing.T) {
	for _, tc := range []struct {
		name string
		down func(d *Daemon)
	}{
		{"redis frozen", func(d *Daemon) { d.Redis.Pause(); t.Cleanup(d.Redis.Resume) }},
		{"redis gone", func(d *Daemon) { d.Redis.Kill() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Start(t)
			tn := d.Tenant(t, "errtext")
			if _, err := tn.Reserve(context.Background()); err != nil { // the key is cached now
				t.Fatal(err)
			}
			_, port, _ := net.SplitHostPort(d.Redis.Addr)
			leaks := func(text string) bool {
				return strings.Contains(text, port) || strings.Contains(text, "127.0.0.1") || strings.Contains(text, "tcp")
			}
			tc.down(d)

			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			rt := cyclesv1.NewRuntimeServiceClient(d.conn)
			_, rerr := tn.Reserve(ctx)
			_, berr := rt.GetBalances(cyclesdtest.KeyCtx(ctx, tn.Key), &cyclesv1.GetBalancesRequest{})
			for name, err := range map[string]error{"CreateReservation": rerr, "GetBalances": berr} {
				st := status.Convert(err)
				if st.Code() != codes.Unavailable {
					t.Errorf("gRPC %s with Redis down: %v, want UNAVAILABLE", name, err)
				}
				if text := prototext.Format(st.Proto()); leaks(text) {
					t.Errorf("gRPC %s shows an internal address: %s", name, text)
				}
			}
			for _, call := range []struct{ method, path, body string }{
				{http.MethodPost, "/v1/reservations", `{"idempotency_key":"e-1","subject":{"tenant":"errtext","workspace":"w"},` +
					`"action":{"kind":"llm.completion","name":"m"},"estimate":{"unit":"TOKENS","amount":10}}`},
				{http.MethodGet, "/v1/balances?tenant=errtext", ""},
			} {
				req, _ := http.NewRequestWithContext(ctx, call.method, "http://"+d.HTTPAddr+call.path, strings.NewReader(call.body))
				req.Header.Set("X-Cycles-API-Key", tn.Key)
				req.Header.Set("Content-Type", "application/json")
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatalf("HTTP %s %s: %v", call.method, call.path, err)
				}
				raw, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if res.StatusCode != http.StatusServiceUnavailable {
					t.Errorf("HTTP %s %s with Redis down: %s %s, want 503", call.method, call.path, res.Status, raw)
				}
				if leaks(string(raw)) || leaks(strings.Join(res.Header.Values("Grpc-Message"), " ")) {
					t.Errorf("HTTP %s %s shows an internal address: %s", call.method, call.path, raw)
				}
			}
			if !strings.Contains(d.Output(), port) {
				t.Errorf("cyclesd's log does not keep the cause (no Redis port %s in it)", port)
			}
		})
	}
}
