package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/app"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/test/httpjson"
	"github.com/cyclesgo/cycles-go/test/redistest"
)

// startDevHTTP starts a dev-mode cyclesd with the HTTP listener on and
// returns its base URL.
func startDevHTTP(t *testing.T) string {
	t.Helper()
	httpAddr := fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t))
	d := startDaemon(t, nil, "-http-listen", httpAddr)
	d.waitServing(t)
	t.Cleanup(http.DefaultClient.CloseIdleConnections)
	return "http://" + httpAddr
}

// curlJSON is what `curl -H 'Content-Type: application/json' -H 'x-cycles-api-key: …' -d '…'` sends.
func curlJSON(t *testing.T, url, key, body string) (int, map[string]any) {
	t.Helper()
	return httpjson.Call(t, http.MethodPost, url, body, auth.APIKeyHeader, key)
}

func TestConnectJSONOnTheHTTPListener(t *testing.T) {
	base := startDevHTTP(t)
	reserveURL := base + "/cycles.v1.RuntimeService/CreateReservation"

	// The README's reserve, as plain curl JSON; int64 amounts are strings.
	code, res := curlJSON(t, reserveURL, app.DevAPIKey, `{"idempotency_key":"curl-1","subject":{"workspace":"prod","agent":"bot"},
		"action":{"kind":"llm.completion","name":"gpt-4o-mini"},"estimate":{"unit":"UNIT_TOKENS","amount":"500"}}`)
	if code != http.StatusOK || res["decision"] != "DECISION_ALLOW" || res["reservationId"] == "" {
		t.Fatalf("curl reserve: HTTP %d %v", code, res)
	}

	// A live refusal: Connect error JSON carrying the ErrorInfo detail.
	code, res = curlJSON(t, reserveURL, app.DevAPIKey, `{"idempotency_key":"curl-2","subject":{"workspace":"prod","agent":"bot"},
		"action":{"kind":"llm.completion","name":"gpt-4o-mini"},"estimate":{"unit":"UNIT_TOKENS","amount":"9007199254740993"}}`)
	details, _ := res["details"].([]any)
	if code == http.StatusOK || res["code"] == nil || len(details) == 0 {
		t.Fatalf("refusal: HTTP %d %v", code, res)
	}
	d := details[0].(map[string]any)
	debug, _ := d["debug"].(map[string]any)
	if d["type"] != "google.rpc.ErrorInfo" || debug["reason"] != "BUDGET_EXCEEDED" || debug["domain"] != "cycles" {
		t.Fatalf("refusal detail: %v", d)
	}

	// No key: the gRPC auth interceptor answers, through Connect.
	code, res = curlJSON(t, reserveURL, "", `{}`)
	if code != http.StatusUnauthorized || res["code"] != "unauthenticated" {
		t.Fatalf("missing key: HTTP %d %v", code, res)
	}
}

func TestConnectServerStreamWatchEvents(t *testing.T) {
	base := startDevHTTP(t)
	for _, opts := range [][]connect.ClientOption{{connect.WithProtoJSON()}, {connect.WithGRPCWeb()}} {
		watch := connect.NewClient[cyclesv1.WatchEventsRequest, cyclesv1.WatchEventsResponse](
			http.DefaultClient, base+"/cycles.v1.EventService/WatchEvents", opts...)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		req := connect.NewRequest(&cyclesv1.WatchEventsRequest{TenantId: app.DevTenant, Start: cyclesv1.StartPosition_START_POSITION_EARLIEST})
		req.Header().Set(auth.AdminKeyHeader, app.DevAdminKey)
		stream, err := watch.CallServerStream(ctx, req)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		// Dev mode seeded the tenant, its key and four budgets.
		var seen []string
		for len(seen) < 6 && stream.Receive() {
			if ev := stream.Msg().GetEvent(); ev != nil {
				if ev.GetCursor() == "" {
					t.Fatalf("event without a cursor: %v", ev)
				}
				seen = append(seen, ev.GetEventType())
			}
		}
		_ = stream.Close()
		cancel()
		want := "tenant.created api_key.created budget.created budget.created budget.created budget.created"
		if strings.Join(seen, " ") != want {
			t.Fatalf("streamed %v (err %v), want %s", seen, stream.Err(), want)
		}
	}
}
