package abuse

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/test/crash/cyclesdtest"
	"github.com/cyclesgo/cycles-go/test/httpjson"
)

// httpCall sends one Cycles HTTP request with tn's key and returns the
// status and the decoded body.
func httpCall(t *testing.T, d *Daemon, key, method, path, body string) (int, map[string]any) {
	t.Helper()
	return httpjson.Call(t, method, "http://"+d.HTTPAddr+path, body, "X-Cycles-API-Key", key)
}

// TestListReservationsOnAFullRedis: with Redis at maxmemory (noeviction) a
// new hold is refused with STORE_FULL, and ListReservations still answers
// on both wires. Before, list.lua removed stale index entries, was not
// no-writes, and was refused with STORE_FULL too.
func TestListReservationsOnAFullRedis(t *testing.T) {
	d := Start(t)
	tn := d.Tenant(t, "lister")
	ctx := context.Background()
	for range 3 {
		if _, err := tn.Reserve(ctx); err != nil {
			t.Fatal(err)
		}
	}
	rdb := d.Redis.Client(t)
	if err := rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	fill := func() {
		used, _ := strconv.ParseInt(infoField(rdb.Info(ctx, "memory").Val(), "used_memory"), 10, 64)
		if err := rdb.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used-64<<10, 10)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { rdb.ConfigSet(context.Background(), "maxmemory", "0") })
	fill()
	if _, err := tn.Reserve(ctx); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("reserve on a full Redis: %v, want RESOURCE_EXHAUSTED (STORE_FULL)", err)
	}
	fill()
	rt := cyclesv1.NewRuntimeServiceClient(d.conn)
	resp, err := rt.ListReservations(cyclesdtest.KeyCtx(ctx, tn.Key), &cyclesv1.ListReservationsRequest{Tenant: tn.Name})
	if err != nil {
		t.Fatalf("gRPC ListReservations on a full Redis: %v", err)
	}
	if n := len(resp.GetReservations()); n < 3 {
		t.Fatalf("gRPC listing on a full Redis: %d rows, want >= 3", n)
	}
	fill()
	code, body := httpCall(t, d, tn.Key, http.MethodGet, "/v1/reservations?tenant="+tn.Name, "")
	if code != http.StatusOK {
		t.Fatalf("HTTP GET /v1/reservations on a full Redis: %d %v", code, body)
	}
	if rows, _ := body["reservations"].([]any); len(rows) < 3 {
		t.Fatalf("HTTP listing on a full Redis: %d rows, want >= 3", len(rows))
	}
	t.Logf("FIGURES full Redis: reserve STORE_FULL; ListReservations answered %d rows on gRPC and HTTP", len(resp.GetReservations()))
}

func infoField(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// TestStrictJSONOnTheWire: the real binary's HTTP wire refuses member names
// that only match case-insensitively and duplicate members, naming them,
// and applies nothing. Before, "eStImAtE" reserved, and a body with both
// estimate and ESTIMATE reserved the second.
func TestStrictJSONOnTheWire(t *testing.T) {
	d := Start(t)
	tn := d.Tenant(t, "strict")
	const base = `"subject":{"workspace":"w"},"action":{"kind":"llm.completion","name":"m"}`
	balance := func() string {
		_, b := httpCall(t, d, tn.Key, http.MethodGet, "/v1/balances?tenant="+tn.Name, "")
		raw, _ := json.Marshal(b["balances"])
		return string(raw)
	}
	before := balance()
	for i, tc := range []struct {
		name, body, field string
	}{
		{"mixed case", `"eStImAtE":{"unit":"TOKENS","amount":5}`, "eStImAtE"},
		{"estimate and ESTIMATE", `"estimate":{"unit":"TOKENS","amount":5},"ESTIMATE":{"unit":"TOKENS","amount":500}`, "ESTIMATE"},
		{"duplicate key", `"estimate":{"unit":"TOKENS","amount":5},"estimate":{"unit":"TOKENS","amount":500}`, "estimate"},
		{"duplicate nested key", `"estimate":{"unit":"TOKENS","amount":5,"amount":500}`, "estimate.amount"},
		{"unknown member", `"estimate":{"unit":"TOKENS","amount":5},"action2":1`, "action2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := fmt.Sprintf(`{"idempotency_key":"strict-%d",%s,%s}`, i, base, tc.body)
			code, out := httpCall(t, d, tn.Key, http.MethodPost, "/v1/reservations", body)
			det, _ := out["details"].(map[string]any)
			if code != http.StatusBadRequest || out["error"] != string(apierr.InvalidRequest) || det["field"] != tc.field {
				t.Fatalf("%s: %d %v, want 400 INVALID_REQUEST naming %q", tc.name, code, out, tc.field)
			}
		})
	}
	// The Kelvin sign K (U+212A) in "kind" binds to "kind" in encoding/json.
	code, out := httpCall(t, d, tn.Key, http.MethodPost, "/v1/reservations",
		"{\"idempotency_key\":\"kelvin\",\"subject\":{\"workspace\":\"w\"},\"action\":{\"\u212aind\":\"llm.completion\",\"name\":\"m\"},\"estimate\":{\"unit\":\"TOKENS\",\"amount\":5}}")
	if det, _ := out["details"].(map[string]any); code != http.StatusBadRequest || det["field"] != "action.\u212aind" {
		t.Fatalf("Kelvin sign: %d %v", code, out)
	}
	if after := balance(); after != before {
		t.Fatalf("a refused body changed the balances:\n%s\n%s", before, after)
	}
	// The exact spelling still reserves.
	code, out = httpCall(t, d, tn.Key, http.MethodPost, "/v1/reservations",
		`{"idempotency_key":"exact",`+base+`,"estimate":{"unit":"TOKENS","amount":5}}`)
	if code != http.StatusOK || out["decision"] != "ALLOW" {
		t.Fatalf("exact body: %d %v", code, out)
	}
}
