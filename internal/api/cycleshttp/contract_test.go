package cycleshttp_test

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"

	"github.com/cyclesgo/cycles-go/test/ledgertest"
)

// contract loads testdata/wire-contract.yaml: cyclesd's own OpenAPI 3.1
// statement of the protocol's response schemas (why a re-statement and not
// the spec file: docs/http-api.md, "Contract test"), checked by a maintained
// OpenAPI 3.1 validator (pb33f/libopenapi-validator).
func contract(t *testing.T) validator.Validator {
	t.Helper()
	spec, err := os.ReadFile("testdata/wire-contract.yaml")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := libopenapi.NewDocument(spec)
	if err != nil {
		t.Fatal(err)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatalf("contract document: %v", errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		for _, e := range verrs {
			t.Errorf("contract document invalid: %s: %s", e.Message, e.Reason)
		}
		t.FailNow()
	}
	return v
}

func check(t *testing.T, v validator.Validator, x exchange) {
	t.Helper()
	req, err := http.NewRequest(x.method, "http://cyclesd"+x.path, strings.NewReader(x.reqBody))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = x.reqHeader
	resp := &http.Response{StatusCode: x.reply.status, Header: x.reply.header, Body: io.NopCloser(bytes.NewReader(x.reply.body)), Request: req}
	if ok, errs := v.ValidateHttpResponse(req, resp); !ok {
		for _, e := range errs {
			var why []string
			for _, s := range e.SchemaValidationErrors {
				why = append(why, s.FieldPath+": "+s.Reason)
			}
			t.Errorf("%s %s -> %d breaks the contract: %s (%s) %v\n  body: %s", x.method, x.path, x.reply.status, e.Message, e.Reason, why, x.reply.body)
		}
	}
}

// Every answer of a session that touches every served endpoint, success and
// error alike, validates against the contract's response schemas.
func TestContract(t *testing.T) {
	v := contract(t)
	var rec []exchange
	e := startFull(t)
	e.rec = &rec
	tenant := strings.ReplaceAll(ledgertest.NewTenantID(t), "_", "-")
	as := []string{"X-Admin-API-Key", adminKey}
	scope := "tenant:" + tenant

	e.call("POST", "/v1/admin/tenants", "", `{"tenant_id":"`+tenant+`","name":"Acme"}`, as...)
	e.call("POST", "/v1/admin/tenants", "", `{"tenant_id":"`+tenant+`","name":"Acme"}`, as...) // duplicate
	e.call("GET", "/v1/admin/tenants/"+tenant, "", "", as...)
	e.call("GET", "/v1/admin/tenants/nobody-here", "", "", as...)
	e.call("GET", "/v1/admin/tenants?limit=2", "", "", as...)
	e.call("GET", "/v1/admin/tenants?search="+tenant, "", "", as...)
	e.call("GET", "/v1/admin/tenants?status=NOPE", "", "", as...) // 400
	e.call("PATCH", "/v1/admin/tenants/"+tenant, "", `{"name":"Acme Inc","metadata":{"team":"x"}}`, as...)
	k := e.call("POST", "/v1/admin/api-keys", "", `{"tenant_id":"`+tenant+`","name":"agent"}`, as...).obj(t)
	key := []string{"X-Cycles-API-Key", k["key_secret"].(string)}
	// A narrowed key: created with every optional field, changed, validated,
	// introspected, refused outside its scopes.
	nk := e.call("POST", "/v1/admin/api-keys", "", `{"tenant_id":"`+tenant+`","name":"narrow","description":"d","permissions":["reservations:create","balances:read"],`+
		`"scope_filter":["workspace:prod"],"expires_at":"2999-01-01T00:00:00Z","metadata":{"team":"x"}}`, as...).obj(t)
	narrow := []string{"X-Cycles-API-Key", nk["key_secret"].(string)}
	e.call("PATCH", "/v1/admin/api-keys/"+nk["key_id"].(string), "", `{"description":"d2","scope_filter":["workspace:prod","agent:*"]}`, as...)
	e.call("PATCH", "/v1/admin/api-keys/"+nk["key_id"].(string), "", `{"permissions":["nope"]}`, as...) // 400
	e.call("PATCH", "/v1/admin/api-keys/"+tenant+"_0123456789abcdef", "", `{"description":"x"}`, as...) // 404
	e.call("POST", "/v1/auth/validate", "", `{"key_secret":"`+nk["key_secret"].(string)+`"}`, as...)
	e.call("POST", "/v1/auth/validate", "", `{"key_secret":"cyc_nope"}`, as...) // valid=false
	e.call("POST", "/v1/auth/validate", "", `{}`, as...)                        // 400
	e.call("GET", "/v1/auth/introspect", "", "", narrow...)
	e.call("GET", "/v1/balances?workspace=ops", "", "", narrow...) // 403 scope_filter
	e.call("POST", "/v1/admin/budgets", "", `{"scope":"`+scope+`","unit":"TOKENS","allocated":{"unit":"TOKENS","amount":1000},"overdraft_limit":{"unit":"TOKENS","amount":100}}`, as...)
	e.call("POST", "/v1/admin/budgets", "", `{"scope":"`+scope+`/workspace:prod","unit":"TOKENS","allocated":{"unit":"TOKENS","amount":500}}`, as...)
	e.call("POST", "/v1/admin/budgets/fund?scope="+scope+"&unit=TOKENS", "", `{"operation":"CREDIT","amount":{"unit":"TOKENS","amount":9223372036854774807},"idempotency_key":"f"}`, as...)
	e.call("POST", "/v1/admin/budgets/fund?scope="+scope+"&unit=TOKENS", "", `{"operation":"DEBIT","amount":{"unit":"TOKENS","amount":1},"idempotency_key":"d"}`, as...)
	e.call("GET", "/v1/admin/budgets?tenant_id="+tenant, "", "", as...)
	e.call("GET", "/v1/admin/budgets/lookup?scope="+scope+"&unit=TOKENS", "", "", as...)
	e.call("GET", "/v1/admin/budgets/lookup?scope="+scope+"&unit=CREDITS", "", "", as...)
	e.call("PATCH", "/v1/admin/budgets?scope="+scope+"&unit=TOKENS", "", `{"commit_overage_policy":"ALLOW_WITH_OVERDRAFT"}`, as...)

	body := func(key string, est int64, extra string) string {
		return `{"idempotency_key":"` + key + `","subject":{"workspace":"prod","agent":"bot","dimensions":{"run":"1"}},` +
			`"action":{"kind":"llm.completion","name":"m","tags":["t"]},"estimate":{"unit":"TOKENS","amount":` + itoa(est) + `}` + extra + `}`
	}
	rid := e.call("POST", "/v1/reservations", "", body("r1", 100, `,"metadata":{"a":1}`), key...).obj(t)["reservation_id"].(string)
	e.call("POST", "/v1/reservations", "", body("r1", 100, `,"metadata":{"a":1}`), key...) // replay
	e.call("POST", "/v1/reservations", "", body("r1", 101, ""), key...)                    // mismatch 409
	e.call("POST", "/v1/reservations", "", body("r2", 5, `,"dry_run":true`), key...)
	e.call("POST", "/v1/reservations", "", body("r3", 5000, `,"dry_run":true`), key...)
	e.call("POST", "/v1/reservations", "", body("r4", 5000, ""), key...) // 409 BUDGET_EXCEEDED
	e.call("POST", "/v1/reservations", "", `{"idempotency_key":"x","subject":{}}`, key...)
	e.call("POST", "/v1/reservations", "", body("r5", 1, ""))                                               // 401
	e.call("POST", "/v1/reservations", "", body("r6", 1, ""), append(key, "X-Idempotency-Key", "other")...) // 400
	e.call("POST", "/v1/reservations/"+rid+"/extend", "", `{"idempotency_key":"x1","extend_by_ms":5000}`, key...)
	e.call("GET", "/v1/reservations/"+rid, "", "", key...)
	e.call("GET", "/v1/reservations/r_"+tenant+"_00000000000000000000000000000000", "", "", key...) // 404
	e.call("POST", "/v1/reservations/"+rid+"/commit", "", `{"idempotency_key":"c1","actual":{"unit":"TOKENS","amount":60},"metrics":{"tokens_input":5,"custom":{"k":"v"}},"metadata":{"m":true}}`, key...)
	e.call("POST", "/v1/reservations/"+rid+"/commit", "", `{"idempotency_key":"c2","actual":{"unit":"TOKENS","amount":60}}`, key...) // 409 finalized
	e.call("GET", "/v1/reservations/"+rid, "", "", key...)
	rid2 := e.call("POST", "/v1/reservations", "", body("r7", 10, ""), key...).obj(t)["reservation_id"].(string)
	e.call("POST", "/v1/reservations/"+rid2+"/release", "", `{"idempotency_key":"rel","reason":"done"}`, key...)
	e.call("GET", "/v1/reservations?include=metadata,committed_metadata&sort_by=created_at_ms", "", "", key...)
	e.call("GET", "/v1/reservations?status=ACTIVE&limit=1", "", "", key...)
	e.call("GET", "/v1/balances?tenant="+tenant, "", "", key...)
	e.call("GET", "/v1/balances", "", "", key...) // 400: no filter
	e.call("POST", "/v1/decide", "", `{"idempotency_key":"d1","subject":{"workspace":"prod"},"action":{"kind":"k","name":"n"},"estimate":{"unit":"TOKENS","amount":1}}`, key...)
	e.call("POST", "/v1/decide", "", `{"idempotency_key":"d2","subject":{"workspace":"prod"},"action":{"kind":"k","name":"n"},"estimate":{"unit":"CREDITS","amount":1}}`, key...) // 400 UNIT_MISMATCH
	e.call("POST", "/v1/events", "", `{"idempotency_key":"e1","subject":{"workspace":"prod"},"action":{"kind":"k","name":"n"},"actual":{"unit":"TOKENS","amount":7},"overage_policy":"REJECT"}`, key...)
	e.call("GET", "/v1/events", "", "", key...)
	evs := e.call("GET", "/v1/admin/events?tenant_id="+tenant+"&category=budget", "", "", as...).obj(t)["events"].([]any)
	e.call("GET", "/v1/admin/events/"+evs[0].(map[string]any)["event_id"].(string), "", "", as...)
	e.call("GET", "/v1/admin/events/"+evs[len(evs)-1].(map[string]any)["event_id"].(string)+"?tenant_id="+tenant, "", "", as...)
	e.call("GET", "/v1/admin/events/evt_0123456789abcdef?tenant_id="+tenant, "", "", as...) // 404 EVENT_NOT_FOUND
	e.call("GET", "/v1/admin/events/evt_0123456789abcdef", "", "", as...)                   // 400: an older id needs tenant_id
	e.call("GET", "/v1/auth/introspect", "", "", key...)
	e.call("GET", "/v1/auth/introspect", "", "", as...)
	e.call("POST", "/v1/admin/budgets/freeze?scope="+scope+"&unit=TOKENS", "", "", as...)
	e.call("POST", "/v1/admin/budgets/freeze?scope="+scope+"&unit=TOKENS", "", "", as...) // 409
	e.call("POST", "/v1/admin/budgets/unfreeze?scope="+scope+"&unit=TOKENS", "", "", as...)
	e.call("GET", "/v1/admin/api-keys?tenant_id="+tenant+"&limit=1", "", "", as...)
	e.call("GET", "/v1/admin/api-keys?limit=2", "", "", as...)      // every tenant
	e.call("GET", "/v1/admin/api-keys?status=WRONG", "", "", as...) // 400
	e.call("DELETE", "/v1/admin/api-keys/"+k["key_id"].(string), "", "", as...)
	e.call("GET", "/v1/admin/api-keys?tenant_id="+tenant+"&status=REVOKED", "", "", as...)
	e.call("PATCH", "/v1/admin/api-keys/"+k["key_id"].(string), "", `{"name":"late"}`, as...)       // 409 revoked
	e.call("POST", "/v1/auth/validate", "", `{"key_secret":"`+k["key_secret"].(string)+`"}`, as...) // REVOKED
	e.call("PATCH", "/v1/admin/tenants/"+tenant, "", `{"status":"CLOSED"}`, as...)
	// The audit trail of this session, and refusals of the listing.
	if logs, _ := e.call("GET", "/v1/admin/audit/logs?tenant_id="+tenant+"&limit=5", "", "", as...).obj(t)["logs"].([]any); len(logs) != 5 {
		t.Errorf("audit listing: %d entries, want a page of 5", len(logs))
	}
	e.call("GET", "/v1/admin/audit/logs?tenant_id="+tenant+"&status_min=400&operation=createTenant,freezeBudget", "", "", as...)
	e.call("GET", "/v1/admin/audit/logs?status=200&status_min=100", "", "", as...) // 400
	e.call("GET", "/v1/admin/audit/logs", "", "", key...)                          // 401: tenant key
	// The overview (after a denial and a budget in debt above).
	if ov := e.call("GET", "/v1/admin/overview", "", "", as...); ov.status != 200 {
		t.Errorf("overview: %d %s", ov.status, ov.body)
	}
	e.call("GET", "/v1/admin/overview", "", "", key...) // 401/403: tenant key
	e.call("GET", "/v1/admin/overview", "", "")         // 401: no key

	// Webhooks: a server on which no subscription can exist.
	e.call("GET", "/v1/admin/webhooks", "", "", as...)
	e.call("POST", "/v1/admin/webhooks", "", `{"url":"https://h.example/x"}`, as...) // 400
	e.call("GET", "/v1/admin/webhooks/whsub_1", "", "", as...)                       // 404
	e.call("GET", "/v1/admin/webhooks/whsub_1/deliveries", "", "", as...)            // 404
	e.call("POST", "/v1/admin/webhooks/whsub_1/replay", "", `{}`, as...)             // 404
	e.call("POST", "/v1/admin/webhooks/bulk-action", "", `{"filter":{},"action":"PAUSE","idempotency_key":"wb"}`, as...)
	e.call("POST", "/v1/admin/webhooks/bulk-action", "", `{"filter":{},"action":"PAUSE","expected_count":1,"idempotency_key":"wb2"}`, as...) // 409
	e.call("GET", "/v1/webhooks", "", "", as...)
	e.call("GET", "/v1/webhooks/whsub_1/deliveries", "", "", as...) // 404

	if len(rec) < 40 {
		t.Fatalf("only %d exchanges recorded", len(rec))
	}
	codes := map[int]bool{}
	for _, x := range rec {
		codes[x.reply.status] = true
		check(t, v, x)
	}
	for _, want := range []int{200, 201, 400, 401, 403, 404, 409} {
		if !codes[want] {
			t.Errorf("the session produced no %d answer to check", want)
		}
	}
}

// The check can fail: an unknown key, a float amount or a proto-style enum
// spelling in a success body breaks the contract.
func TestContractCatchesDrift(t *testing.T) {
	v := contract(t)
	good := `{"status":"COMMITTED","charged":{"unit":"TOKENS","amount":5}}`
	for name, body := range map[string]string{
		"unknown key":        `{"status":"COMMITTED","charged":{"unit":"TOKENS","amount":5},"debt_incurred":0}`,
		"fractional amount":  `{"status":"COMMITTED","charged":{"unit":"TOKENS","amount":5.5}}`,
		"proto enum":         `{"status":"COMMITTED","charged":{"unit":"UNIT_TOKENS","amount":5}}`,
		"missing charged":    `{"status":"COMMITTED"}`,
		"amount as a string": `{"status":"COMMITTED","charged":{"unit":"TOKENS","amount":"5"}}`,
	} {
		req, _ := http.NewRequest("POST", "http://cyclesd/v1/reservations/r_x_1/commit", strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(strings.NewReader(body)), Request: req}
		if ok, _ := v.ValidateHttpResponse(req, resp); ok {
			t.Errorf("%s: %s passed the contract", name, body)
		}
	}
	req, _ := http.NewRequest("POST", "http://cyclesd/v1/reservations/r_x_1/commit", strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "application/json")
	resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(strings.NewReader(good)), Request: req}
	if ok, errs := v.ValidateHttpResponse(req, resp); !ok {
		t.Fatalf("a valid body failed: %v", errs[0].Message)
	}
}

// An event whose data carries an amount as a string breaks the contract; the
// same event with integers passes.
func TestContractCatchesEventDataDrift(t *testing.T) {
	v := contract(t)
	ev := func(data string) string {
		return `{"events":[{"event_id":"evt_0123456789abcdef","event_type":"budget.funded","category":"budget","timestamp":"2026-01-01T00:00:00.000Z","tenant_id":"t","source":"cyclesd","data":` + data + `}],"has_more":false}`
	}
	for _, c := range []struct {
		data string
		ok   bool
	}{
		{`{"new_state":{"allocated":1000000,"remaining":5}}`, true},
		{`{"requested_amount":9223372036854775807,"unit":"TOKENS"}`, true},
		{`{"new_state":{"allocated":"1000000"}}`, false},
		{`{"requested_amount":"5"}`, false},
		{`{"debt":1.5}`, false},
	} {
		req, _ := http.NewRequest("GET", "http://cyclesd/v1/events", nil)
		resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(strings.NewReader(ev(c.data))), Request: req}
		if ok, errs := v.ValidateHttpResponse(req, resp); ok != c.ok {
			t.Errorf("data %s: valid=%v, want %v (%v)", c.data, ok, c.ok, errs)
		}
	}
}
