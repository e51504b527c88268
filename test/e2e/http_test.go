package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/test/redistest"
)

// The real binary serves the Cycles HTTP wire on -http-listen beside gRPC:
// an operator provisions over HTTP with the reference admin header, an agent
// reserves over HTTP and commits over gRPC, and the HTTP balance shows the
// one ledger; the readiness paths the SDKs probe answer UP.
func TestHTTPWireOnTheBinary(t *testing.T) {
	srv := redistest.Start(t)
	httpAddr := fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t))
	d := serveOn(t, srv, "-http-listen", httpAddr)
	base := "http://" + httpAddr
	do := func(method, path, body string, hdr ...string) (int, map[string]any) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		dec := json.NewDecoder(strings.NewReader(string(raw)))
		dec.UseNumber()
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			t.Fatalf("%s %s: not JSON: %s", method, path, raw)
		}
		return resp.StatusCode, m
	}
	for _, p := range []string{"/readyz", "/actuator/health/readiness"} {
		if code, m := do("GET", p, ""); code != 200 || m["status"] != "UP" {
			t.Fatalf("%s: %d %v", p, code, m)
		}
	}
	admin := []string{"X-Admin-API-Key", adminKey}
	if code, m := do("POST", "/v1/admin/tenants", `{"tenant_id":"acme","name":"Acme"}`, admin...); code != 201 {
		t.Fatalf("tenant: %d %v", code, m)
	}
	code, k := do("POST", "/v1/admin/api-keys", `{"tenant_id":"acme","name":"agents"}`, admin...)
	if code != 201 {
		t.Fatalf("key: %d %v", code, k)
	}
	key := k["key_secret"].(string)
	if code, m := do("POST", "/v1/admin/budgets", `{"scope":"tenant:acme","unit":"USD_MICROCENTS","allocated":{"unit":"USD_MICROCENTS","amount":9223372036854775807}}`, admin...); code != 201 {
		t.Fatalf("budget: %d %v", code, m)
	}
	code, r := do("POST", "/v1/reservations", `{"idempotency_key":"r1","subject":{"workspace":"w"},"action":{"kind":"llm.completion","name":"m"},"estimate":{"unit":"USD_MICROCENTS","amount":9007199254740993}}`,
		"X-Cycles-API-Key", key, "X-Idempotency-Key", "r1")
	if code != 200 || r["decision"] != "ALLOW" {
		t.Fatalf("reserve: %d %v", code, r)
	}
	rt := cyclesv1.NewRuntimeServiceClient(d.conn(t))
	if _, err := rt.CommitReservation(keyCtx(key), &cyclesv1.CommitReservationRequest{ReservationId: r["reservation_id"].(string), IdempotencyKey: "c1",
		Actual: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_USD_MICROCENTS, Amount: 9007199254740993}}); err != nil {
		t.Fatal(err)
	}
	code, b := do("GET", "/v1/balances?tenant=acme", "", "X-Cycles-API-Key", key)
	bal := b["balances"].([]any)[0].(map[string]any)
	if code != 200 || bal["spent"].(map[string]any)["amount"] != json.Number("9007199254740993") ||
		bal["remaining"].(map[string]any)["amount"] != json.Number("9214364837600034814") {
		t.Fatalf("balances: %d %v", code, b)
	}
	if code, m := do("POST", "/v1/reservations", `{"idempotency_key":"r2","subject":{"workspace":"w"},"action":{"kind":"k","name":"n"},"estimate":{"unit":"USD_MICROCENTS","amount":9223372036854775807}}`,
		"X-Cycles-API-Key", key); code != 409 || m["error"] != "BUDGET_EXCEEDED" {
		t.Fatalf("refusal: %d %v", code, m)
	}
}
