package cycleshttp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc/metadata"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/ratelimit"
	"github.com/cyclesgo/cycles-go/internal/server"
	"github.com/cyclesgo/cycles-go/test/grpctest"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
	"github.com/cyclesgo/cycles-go/test/redistest"
	"github.com/cyclesgo/cycles-go/test/scripttest"
)

// Every error of PROTOCOL semantics the runtime can produce, on the HTTP
// wire: status, error code, request id, details, and Redis unchanged by the
// refused call (the scenarios of runtimeapi's TestErrorCodes).
func TestErrorStatuses(t *testing.T) {
	e := start(t, redistest.SharedClient(t))
	commit := func(f *fixture, rid, body string) reply {
		return f.call("POST", "/v1/reservations/"+rid+"/commit", f.tenant, body)
	}
	cases := []struct {
		name   string
		status int
		code   string
		detail map[string]any
		setup  func(f *fixture) func() reply
	}{
		{"validation", 400, "INVALID_REQUEST", map[string]any{"field": "idempotency_key"}, func(f *fixture) func() reply {
			return func() reply { return f.call("POST", "/v1/reservations", f.tenant, reserveBody("", 1)) }
		}},
		{"idempotency header differs from body", 400, "INVALID_REQUEST", map[string]any{"field": "idempotency_key"}, func(f *fixture) func() reply {
			f.budget("", ledgertest.Budget{Allocated: 100})
			return func() reply {
				return f.call("POST", "/v1/reservations", f.tenant, reserveBody("k", 1), "X-Idempotency-Key", "other")
			}
		}},
		{"malformed list cursor", 400, "INVALID_REQUEST", nil, func(f *fixture) func() reply {
			return func() reply { return f.call("GET", "/v1/reservations?cursor=%25%25%25", f.tenant, "") }
		}},
		{"unit mismatch on reserve", 400, "UNIT_MISMATCH", map[string]any{"requested_unit": "TOKENS", "expected_units": []any{"CREDITS"}}, func(f *fixture) func() reply {
			f.budget("", ledgertest.Budget{Unit: "CREDITS", Allocated: 100})
			return func() reply { return f.call("POST", "/v1/reservations", f.tenant, reserveBody("k", 1)) }
		}},
		{"unit mismatch on commit", 400, "UNIT_MISMATCH", nil, func(f *fixture) func() reply {
			f.budget("", ledgertest.Budget{Allocated: 100})
			rid := f.reserve("k", 10)
			return func() reply {
				return commit(f, rid, `{"idempotency_key":"c","actual":{"unit":"CREDITS","amount":1}}`)
			}
		}},
		{"no API key", 401, "UNAUTHORIZED", nil, func(f *fixture) func() reply {
			return func() reply { return f.call("POST", "/v1/reservations", "", reserveBody("k", 1)) }
		}},
		{"unknown API key", 401, "UNAUTHORIZED", nil, func(f *fixture) func() reply {
			return func() reply {
				return f.call("POST", "/v1/reservations", "", reserveBody("k", 1), "X-Cycles-API-Key", "cyc_nope")
			}
		}},
		{"401 before 400: bad body without a key", 401, "UNAUTHORIZED", nil, func(f *fixture) func() reply {
			return func() reply { return f.call("POST", "/v1/reservations", "", `{"nope":`) }
		}},
		{"subject of another tenant", 403, "FORBIDDEN", nil, func(f *fixture) func() reply {
			f.budget("", ledgertest.Budget{Allocated: 100})
			return func() reply {
				body := strings.Replace(reserveBody("k", 1), `"workspace"`, `"tenant":"`+f.tenant+`x","workspace"`, 1)
				return f.call("POST", "/v1/reservations", f.tenant, body)
			}
		}},
		{"tenant filter of another tenant", 403, "FORBIDDEN", nil, func(f *fixture) func() reply {
			return func() reply { return f.call("GET", "/v1/balances?tenant=someone-else", f.tenant, "") }
		}},
		{"no budget", 404, "NOT_FOUND", nil, func(f *fixture) func() reply {
			return func() reply { return f.call("POST", "/v1/reservations", f.tenant, reserveBody("k", 1)) }
		}},
		{"unknown reservation", 404, "NOT_FOUND", nil, func(f *fixture) func() reply {
			return func() reply { return f.call("GET", "/v1/reservations/nope", f.tenant, "") }
		}},
		{"budget exceeded", 409, "BUDGET_EXCEEDED", map[string]any{"remaining": json.Number("100"), "requested": json.Number("101")}, func(f *fixture) func() reply {
			f.budget("", ledgertest.Budget{Allocated: 100})
			return func() reply { return f.call("POST", "/v1/reservations", f.tenant, reserveBody("k", 101)) }
		}},
		{"budget frozen", 409, "BUDGET_FROZEN", nil, func(f *fixture) func() reply {
			f.budget("", ledgertest.Budget{Allocated: 100, Status: "FROZEN"})
			return func() reply { return f.call("POST", "/v1/reservations", f.tenant, reserveBody("k", 1)) }
		}},
		{"budget closed", 409, "BUDGET_CLOSED", nil, func(f *fixture) func() reply {
			f.budget("", ledgertest.Budget{Allocated: 100, Status: "CLOSED"})
			return func() reply { return f.call("POST", "/v1/reservations", f.tenant, reserveBody("k", 1)) }
		}},
		{"over limit", 409, "OVERDRAFT_LIMIT_EXCEEDED", nil, func(f *fixture) func() reply {
			f.budget("", ledgertest.Budget{Allocated: 100, IsOverLimit: true})
			return func() reply { return f.call("POST", "/v1/reservations", f.tenant, reserveBody("k", 1)) }
		}},
		{"debt outstanding", 409, "DEBT_OUTSTANDING", nil, func(f *fixture) func() reply {
			f.budget("", ledgertest.Budget{Allocated: 100, Debt: 1})
			return func() reply { return f.call("POST", "/v1/reservations", f.tenant, reserveBody("k", 1)) }
		}},
		{"reservation finalized", 409, "RESERVATION_FINALIZED", nil, func(f *fixture) func() reply {
			f.budget("", ledgertest.Budget{Allocated: 100})
			rid := f.reserve("k", 10)
			if r := f.call("POST", "/v1/reservations/"+rid+"/release", f.tenant, `{"idempotency_key":"r"}`); r.status != 200 {
				f.t.Fatalf("release: %d %s", r.status, r.body)
			}
			return func() reply { return commit(f, rid, `{"idempotency_key":"c","actual":{"unit":"TOKENS","amount":1}}`) }
		}},
		{"reservation expired", 410, "RESERVATION_EXPIRED", nil, func(f *fixture) func() reply {
			f.budget("", ledgertest.Budget{Allocated: 100})
			rid := f.reserve("k", 10)
			ledgertest.Backdate(f.t, f.c, f.tenant, rid, 10*time.Second, 5*time.Second)
			return func() reply { return commit(f, rid, `{"idempotency_key":"c","actual":{"unit":"TOKENS","amount":1}}`) }
		}},
		{"idempotency mismatch", 409, "IDEMPOTENCY_MISMATCH", nil, func(f *fixture) func() reply {
			f.budget("", ledgertest.Budget{Allocated: 100})
			f.reserve("k", 10)
			return func() reply { return f.call("POST", "/v1/reservations", f.tenant, reserveBody("k", 11)) }
		}},
		{"max extensions", 409, "MAX_EXTENSIONS_EXCEEDED", nil, func(f *fixture) func() reply {
			zero := 0
			ledgertest.SeedTenant(f.t, f.c, f.tenant, ledgertest.Tenant{MaxExtensions: &zero})
			f.budget("", ledgertest.Budget{Allocated: 100})
			rid := f.reserve("k", 10)
			return func() reply {
				return f.call("POST", "/v1/reservations/"+rid+"/extend", f.tenant, `{"idempotency_key":"x","extend_by_ms":10}`)
			}
		}},
		{"tenant closed", 409, "TENANT_CLOSED", nil, func(f *fixture) func() reply {
			ledgertest.SeedTenant(f.t, f.c, f.tenant, ledgertest.Tenant{Status: "CLOSED"})
			f.budget("", ledgertest.Budget{Allocated: 100})
			return func() reply {
				return f.call("POST", "/v1/events", f.tenant, `{"idempotency_key":"e","subject":{"workspace":"prod"},"action":{"kind":"k","name":"n"},"actual":{"unit":"TOKENS","amount":1}}`)
			}
		}},
		{"tenant suspended (folded into the runtime enum)", 403, "FORBIDDEN", map[string]any{"reason": "TENANT_SUSPENDED"}, func(f *fixture) func() reply {
			ledgertest.SeedTenant(f.t, f.c, f.tenant, ledgertest.Tenant{Status: "SUSPENDED"})
			f.budget("", ledgertest.Budget{Allocated: 100})
			return func() reply { return f.call("POST", "/v1/reservations", f.tenant, reserveBody("k", 1)) }
		}},
		{"malformed tenant record", 500, "INTERNAL_ERROR", nil, func(f *fixture) func() reply {
			ledgertest.SeedTenant(f.t, f.c, f.tenant, ledgertest.Tenant{Status: "??"})
			f.budget("", ledgertest.Budget{Allocated: 100})
			return func() reply {
				return f.call("POST", "/v1/decide", f.tenant, `{"idempotency_key":"d","subject":{"workspace":"prod"},"action":{"kind":"k","name":"n"},"estimate":{"unit":"TOKENS","amount":1}}`)
			}
		}},
		{"amount overflow", 400, "INVALID_REQUEST", map[string]any{"reason": "AMOUNT_OVERFLOW"}, func(f *fixture) func() reply {
			f.budget("", ledgertest.Budget{Allocated: 100, Spent: 9223372036854775800, RemainingOverride: "100"})
			return func() reply {
				return f.call("POST", "/v1/events", f.tenant, `{"idempotency_key":"e","subject":{"workspace":"prod"},"action":{"kind":"k","name":"n"},"actual":{"unit":"TOKENS","amount":50}}`)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := &fixture{env: &env{t: t, c: e.c, base: e.base, grpc: e.grpc}, tenant: ledgertest.NewTenantID(t)}
			call := tc.setup(f)
			before := ledgertest.Dump(t, e.c, f.tenant)
			r := call()
			if r.status != tc.status {
				t.Fatalf("status = %d, want %d: %s", r.status, tc.status, r.body)
			}
			body := r.obj(t)
			onlyKeys(t, "error body", body, "error", "message", "request_id", "trace_id", "details")
			if body["error"] != tc.code || body["request_id"] != "req-test" || body["message"] == "" {
				t.Fatalf("body = %s, want error %s and request_id req-test", r.body, tc.code)
			}
			if tid, _ := body["trace_id"].(string); len(tid) != 32 || r.header.Get("X-Cycles-Trace-Id") != tid {
				t.Fatalf("trace_id %q, header %q", tid, r.header.Get("X-Cycles-Trace-Id"))
			}
			if r.header.Get("X-Request-Id") != "req-test" || r.header.Get("Content-Type") != "application/json" {
				t.Fatalf("headers %v", r.header)
			}
			details, _ := body["details"].(map[string]any)
			for k, v := range tc.detail {
				got, _ := json.Marshal(details[k])
				want, _ := json.Marshal(v)
				if !bytes.Equal(got, want) {
					t.Fatalf("details.%s = %s, want %s (body %s)", k, got, want, r.body)
				}
			}
			if after := ledgertest.Dump(t, e.c, f.tenant); after != before {
				t.Fatalf("the refused call changed Redis:\n--- before\n%s--- after\n%s", before, after)
			}
		})
	}
}

// Malformed bodies, wrong types, unknown keys and enum values, out-of-range
// integers and oversize bodies are 400 INVALID_REQUEST naming the field, and
// write nothing.
func TestBadInput(t *testing.T) {
	f := funded(t, 1000)
	valid := reserveBody("k", 1)
	cases := []struct {
		name, body, field string
	}{
		{"malformed JSON", `{"idempotency_key":`, "body"},
		{"not an object", `[1,2]`, "body"},
		{"empty body", ``, "body"},
		{"trailing data", valid + `{}`, "body"},
		{"unknown top-level key", strings.Replace(valid, `{"idempotency_key"`, `{"colour":"red","idempotency_key"`, 1), "colour"},
		{"unknown nested key", strings.Replace(valid, `"kind"`, `"flavour":"x","kind"`, 1), "action.flavour"}, // its path, as every field is named
		{"unknown unit", strings.Replace(valid, `"TOKENS"`, `"DOLLARS"`, 1), "estimate.unit"},
		{"proto spelling of a unit", strings.Replace(valid, `"TOKENS"`, `"UNIT_TOKENS"`, 1), "estimate.unit"},
		{"unknown overage policy", strings.Replace(valid, `}}`, `},"overage_policy":"SOMETIMES"}`, 1), "overage_policy"},
		{"amount as a string", strings.Replace(valid, `"amount":1`, `"amount":"1"`, 1), "estimate.amount"},
		{"fractional amount", strings.Replace(valid, `"amount":1`, `"amount":1.5`, 1), "estimate.amount"},
		{"amount past int64", strings.Replace(valid, `"amount":1`, `"amount":9223372036854775808`, 1), "estimate.amount"},
		{"negative amount", strings.Replace(valid, `"amount":1`, `"amount":-1`, 1), "estimate.amount"},
		{"missing amount", strings.Replace(valid, `,"amount":1`, ``, 1), "estimate.amount"},
		{"ttl as a boolean", strings.Replace(valid, `}}`, `},"ttl_ms":true}`, 1), "ttl_ms"},
		{"ttl out of range", strings.Replace(valid, `}}`, `},"ttl_ms":5}`, 1), "ttl_ms"},
		{"empty subject value", strings.Replace(valid, `"prod"`, `""`, 1), "subject.workspace"},
		{"missing subject", strings.Replace(valid, `"subject":{"workspace":"prod"},`, ``, 1), "subject"},
		{"oversize body", strings.Replace(valid, `}}`, `},"metadata":{"pad":"`+strings.Repeat("x", 70<<10)+`"}}`, 1), "body"},
	}
	before := ledgertest.Dump(t, f.c, f.tenant)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f.t = t
			r := f.call("POST", "/v1/reservations", f.tenant, tc.body)
			if r.status != 400 {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			b := r.obj(t)
			details, _ := b["details"].(map[string]any)
			if b["error"] != "INVALID_REQUEST" || details["field"] != tc.field {
				t.Fatalf("body %s, want INVALID_REQUEST naming %s", r.body, tc.field)
			}
		})
	}
	f.t = t
	if after := ledgertest.Dump(t, f.c, f.tenant); after != before {
		t.Fatalf("refused requests changed Redis:\n%s\n%s", before, after)
	}
	// Bad query parameters too.
	for q, field := range map[string]string{
		"/v1/reservations?status=PENDING":                                    "status",
		"/v1/reservations?limit=0":                                           "limit",
		"/v1/reservations?limit=x":                                           "limit",
		"/v1/reservations?from=yesterday":                                    "from",
		"/v1/reservations?sort_dir=sideways":                                 "sort_dir",
		"/v1/balances?include_children=maybe":                                "include_children",
		"/v1/reservations?from=2026-02-01T00:00:00Z&to=2026-01-01T00:00:00Z": "from",
	} {
		r := f.call("GET", q, f.tenant, "")
		b := r.obj(t)
		details, _ := b["details"].(map[string]any)
		if r.status != 400 || details["field"] != field {
			t.Errorf("%s: %d %s, want 400 naming %s", q, r.status, r.body, field)
		}
	}
	// Blank window bounds are unset (spec), unknown parameters ignored.
	if r := f.call("GET", "/v1/reservations?from=&to=&expires_from=&finalized_to=&colour=red&include=", f.tenant, ""); r.status != 200 {
		t.Errorf("blank bounds: %d %s", r.status, r.body)
	}
}

// The whole lifecycle on the HTTP wire: statuses, exact key sets (no key
// outside the spec's response schema), omissions, and the ledger.
func TestLifecycle(t *testing.T) {
	f := funded(t, 1000)
	body := strings.Replace(reserveBody("k1", 100), `"workspace"`, `"tenant":"`+f.tenant+`","dimensions":{"run":"r1"},"workspace"`, 1)
	body = strings.Replace(body, `}}`, `},"ttl_ms":60000,"metadata":{"step":3,"tags":["a"]}}`, 1)
	r := f.call("POST", "/v1/reservations", f.tenant, body, "X-Idempotency-Key", "k1")
	if r.status != 200 {
		t.Fatalf("reserve %d %s", r.status, r.body)
	}
	if r.header.Get("X-Cycles-Tenant") != f.tenant {
		t.Errorf("X-Cycles-Tenant %q", r.header.Get("X-Cycles-Tenant"))
	}
	res := r.obj(t)
	onlyKeys(t, "reserve", res, "decision", "reservation_id", "reserved", "expires_at_ms", "remaining_ttl_ms", "scope_path", "affected_scopes", "balances")
	if res["decision"] != "ALLOW" || res["remaining_ttl_ms"] != json.Number("60000") || res["scope_path"] != f.path("workspace:prod") {
		t.Fatalf("reserve body %s", r.body)
	}
	rid := res["reservation_id"].(string)
	bal := res["balances"].([]any)[0].(map[string]any)
	onlyKeys(t, "balance", bal, "scope", "scope_path", "remaining", "reserved", "spent", "allocated")
	if bal["remaining"].(map[string]any)["amount"] != json.Number("900") || bal["reserved"].(map[string]any)["unit"] != "TOKENS" {
		t.Fatalf("balance %v", bal)
	}

	r = f.call("POST", "/v1/reservations/"+rid+"/extend", f.tenant, `{"idempotency_key":"x","extend_by_ms":1000}`)
	if r.status != 200 {
		t.Fatalf("extend %d %s", r.status, r.body)
	}
	ext := r.obj(t)
	onlyKeys(t, "extend", ext, "status", "expires_at_ms", "remaining_ttl_ms", "balances")
	if ext["status"] != "ACTIVE" || ext["remaining_ttl_ms"] == nil {
		t.Fatalf("extend body %s", r.body)
	}

	r = f.call("POST", "/v1/reservations/"+rid+"/commit", f.tenant,
		`{"idempotency_key":"c1","actual":{"unit":"TOKENS","amount":40},"metrics":{"tokens_input":10,"model_version":"v"},"metadata":{"ok":true}}`,
		"X-Idempotency-Key", "c1")
	if r.status != 200 {
		t.Fatalf("commit %d %s", r.status, r.body)
	}
	cm := r.obj(t)
	onlyKeys(t, "commit", cm, "status", "charged", "released", "balances")
	if cm["status"] != "COMMITTED" || cm["charged"].(map[string]any)["amount"] != json.Number("40") || cm["released"].(map[string]any)["amount"] != json.Number("60") {
		t.Fatalf("commit body %s", r.body)
	}

	r = f.call("GET", "/v1/reservations/"+rid, f.tenant, "")
	if r.status != 200 {
		t.Fatalf("get %d %s", r.status, r.body)
	}
	g := r.obj(t)
	onlyKeys(t, "get", g, "reservation_id", "status", "idempotency_key", "subject", "action", "reserved", "committed",
		"created_at_ms", "expires_at_ms", "finalized_at_ms", "scope_path", "affected_scopes", "metadata", "committed_metadata")
	if g["status"] != "COMMITTED" || g["committed"] == nil || g["finalized_at_ms"] == nil || g["idempotency_key"] != "k1" {
		t.Fatalf("get body %s", r.body)
	}
	if sub := g["subject"].(map[string]any); sub["tenant"] != f.tenant || sub["dimensions"].(map[string]any)["run"] != "r1" {
		t.Fatalf("subject not round-tripped: %s", r.body)
	}
	if md := g["metadata"].(map[string]any); md["step"] != json.Number("3") {
		t.Fatalf("metadata not round-tripped: %s", r.body)
	}

	r = f.call("GET", "/v1/reservations?tenant="+f.tenant+"&status=COMMITTED", f.tenant, "")
	l := r.obj(t)
	onlyKeys(t, "list", l, "reservations", "next_cursor", "has_more")
	rows := l["reservations"].([]any)
	if r.status != 200 || len(rows) != 1 {
		t.Fatalf("list %d %s", r.status, r.body)
	}
	if _, has := rows[0].(map[string]any)["metadata"]; has {
		t.Fatalf("list row carries metadata without include=metadata: %s", r.body)
	}
	r = f.call("GET", "/v1/reservations?include=metadata,committed_metadata&sort_by=created_at_ms&sort_dir=asc", f.tenant, "")
	if rows := r.obj(t)["reservations"].([]any); r.status != 200 || len(rows) != 1 || rows[0].(map[string]any)["metadata"] == nil {
		t.Fatalf("list with include %d %s", r.status, r.body)
	}
	if r := f.call("GET", "/v1/reservations?status=ACTIVE", f.tenant, ""); len(r.obj(t)["reservations"].([]any)) != 0 {
		t.Fatalf("status filter: %s", r.body)
	}

	r = f.call("GET", "/v1/balances?tenant="+f.tenant, f.tenant, "")
	b := r.obj(t)
	onlyKeys(t, "balances", b, "balances", "next_cursor", "has_more")
	if r.status != 200 || len(b["balances"].([]any)) != 1 || b["balances"].([]any)[0].(map[string]any)["spent"].(map[string]any)["amount"] != json.Number("40") {
		t.Fatalf("balances %d %s", r.status, r.body)
	}

	r = f.call("POST", "/v1/decide", f.tenant, `{"idempotency_key":"d","subject":{"workspace":"prod"},"action":{"kind":"k","name":"n"},"estimate":{"unit":"TOKENS","amount":5000}}`)
	d := r.obj(t)
	onlyKeys(t, "decide", d, "decision", "caps", "reason_code", "retry_after_ms", "affected_scopes")
	if r.status != 200 || d["decision"] != "DENY" || d["reason_code"] != "BUDGET_EXCEEDED" {
		t.Fatalf("decide %d %s", r.status, r.body)
	}

	r = f.call("POST", "/v1/events", f.tenant, `{"idempotency_key":"e","subject":{"workspace":"prod"},"action":{"kind":"k","name":"n"},"actual":{"unit":"TOKENS","amount":10},"client_time_ms":1}`)
	ev := r.obj(t)
	onlyKeys(t, "event", ev, "status", "event_id", "charged", "balances")
	if r.status != 201 || ev["status"] != "APPLIED" || ev["event_id"] == "" {
		t.Fatalf("event %d %s", r.status, r.body)
	}

	// Release of a second reservation; a dry run omits what it must.
	rid2 := f.reserve("k2", 10)
	r = f.call("POST", "/v1/reservations/"+rid2+"/release", f.tenant, `{"idempotency_key":"r","reason":"done"}`)
	rel := r.obj(t)
	onlyKeys(t, "release", rel, "status", "released", "balances")
	if r.status != 200 || rel["status"] != "RELEASED" || rel["released"].(map[string]any)["amount"] != json.Number("10") {
		t.Fatalf("release %d %s", r.status, r.body)
	}
	dry := strings.Replace(reserveBody("k3", 5), `}}`, `},"dry_run":true}`, 1)
	r = f.call("POST", "/v1/reservations", f.tenant, dry)
	dr := r.obj(t)
	onlyKeys(t, "dry run", dr, "decision", "reserved", "scope_path", "affected_scopes", "balances", "caps", "reason_code")
	if r.status != 200 || dr["decision"] != "ALLOW" {
		t.Fatalf("dry run %d %s", r.status, r.body)
	}
	dry = strings.Replace(reserveBody("k4", 5000), `}}`, `},"dry_run":true}`, 1)
	if r := f.call("POST", "/v1/reservations", f.tenant, dry); r.status != 200 || r.obj(t)["decision"] != "DENY" || r.obj(t)["reason_code"] != "BUDGET_EXCEEDED" {
		t.Fatalf("dry run deny %d %s", r.status, r.body)
	}
	ledgertest.CheckInvariants(t, f.c, f.tenant)
}

// Amounts are JSON integers and stay exact past 2^53 both ways: 2^53+1 and
// 2^63-1 go in and come back digit for digit, and land exactly in Redis.
func TestExactInt64(t *testing.T) {
	f := funded(t, 9223372036854775807)
	r := f.call("POST", "/v1/reservations", f.tenant, reserveBody("k", 9007199254740993))
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if !bytes.Contains(r.body, []byte(`"reserved":{"unit":"TOKENS","amount":9007199254740993}`)) ||
		!bytes.Contains(r.body, []byte(`"allocated":{"unit":"TOKENS","amount":9223372036854775807}`)) ||
		!bytes.Contains(r.body, []byte(`"remaining":{"unit":"TOKENS","amount":9214364837600034814}`)) {
		t.Fatalf("amounts not exact: %s", r.body)
	}
	rid := r.obj(t)["reservation_id"].(string)
	r = f.call("POST", "/v1/reservations/"+rid+"/commit", f.tenant, `{"idempotency_key":"c","actual":{"unit":"TOKENS","amount":9007199254740993}}`)
	if r.status != 200 || !bytes.Contains(r.body, []byte(`"charged":{"unit":"TOKENS","amount":9007199254740993}`)) {
		t.Fatalf("commit %d %s", r.status, r.body)
	}
	st := ledgertest.ReadBudget(t, f.c, f.tenant, f.path(""), "TOKENS")
	if got := st.String(); !strings.Contains(got, "9007199254740993") {
		t.Fatalf("Redis holds %s", got)
	}
	r = f.call("GET", "/v1/balances?tenant="+f.tenant, f.tenant, "")
	if !bytes.Contains(r.body, []byte(`"spent":{"unit":"TOKENS","amount":9007199254740993}`)) {
		t.Fatalf("balances %s", r.body)
	}
	ledgertest.CheckInvariants(t, f.c, f.tenant)
}

// An idempotent replay returns the byte-identical original body (reserve:
// except remaining_ttl_ms, which the protocol recomputes), and charges once.
func TestReplayIsByteIdentical(t *testing.T) {
	f := funded(t, 1000)
	first := f.call("POST", "/v1/reservations", f.tenant, reserveBody("k", 100))
	again := f.call("POST", "/v1/reservations", f.tenant, reserveBody("k", 100))
	strip := func(r reply) map[string]any { m := r.obj(t); delete(m, "remaining_ttl_ms"); return m }
	a, _ := json.Marshal(strip(first))
	b, _ := json.Marshal(strip(again))
	if first.status != 200 || again.status != 200 || !bytes.Equal(a, b) {
		t.Fatalf("reserve replay differs:\n%s\n%s", first.body, again.body)
	}
	rid := first.obj(t)["reservation_id"].(string)
	for _, c := range []struct{ path, body string }{
		{"/v1/reservations/" + rid + "/extend", `{"idempotency_key":"x","extend_by_ms":1000}`},
		{"/v1/reservations/" + rid + "/commit", `{"idempotency_key":"c","actual":{"unit":"TOKENS","amount":150}}`},
		{"/v1/events", `{"idempotency_key":"e","subject":{"workspace":"prod"},"action":{"kind":"k","name":"n"},"actual":{"unit":"TOKENS","amount":7}}`},
		{"/v1/decide", `{"idempotency_key":"d","subject":{"workspace":"prod"},"action":{"kind":"k","name":"n"},"estimate":{"unit":"TOKENS","amount":7}}`},
	} {
		one := f.call("POST", c.path, f.tenant, c.body)
		two := f.call("POST", c.path, f.tenant, c.body)
		if one.status >= 300 || one.status != two.status {
			t.Fatalf("%s: %d %s / %d %s", c.path, one.status, one.body, two.status, two.body)
		}
		if strings.HasSuffix(c.path, "/extend") {
			m1, m2 := strip(one), strip(two)
			a, _ := json.Marshal(m1)
			b, _ := json.Marshal(m2)
			if !bytes.Equal(a, b) {
				t.Fatalf("extend replay differs:\n%s\n%s", one.body, two.body)
			}
			continue
		}
		if !bytes.Equal(one.body, two.body) {
			t.Fatalf("%s replay not byte-identical:\n%s\n%s", c.path, one.body, two.body)
		}
	}
	st := ledgertest.ReadBudget(t, f.c, f.tenant, f.path(""), "TOKENS")
	if !strings.Contains(st.String(), "157") { // 150 committed + 7 event, each once
		t.Fatalf("charged more than once: %s", st)
	}
	ledgertest.CheckInvariants(t, f.c, f.tenant)
}

// traceparent, then X-Cycles-Trace-Id, set the trace id echoed in
// X-Cycles-Trace-Id (and error bodies); malformed ones are ignored, never
// refused; X-Request-Id is honoured and returned.
func TestTraceAndRequestIDs(t *testing.T) {
	e := start(t, redistest.SharedClient(t))
	f := e.fixture()
	const tp = "4bf92f3577b34da6a3ce929d0e0e4736"
	const flat = "0123456789abcdef0123456789abcdef"
	cases := []struct {
		name string
		kv   []string
		want string // "" = any fresh valid id
	}{
		{"traceparent", []string{"traceparent", "00-" + tp + "-00f067aa0ba902b7-01"}, tp},
		{"flat header", []string{"X-Cycles-Trace-Id", flat}, flat},
		{"traceparent wins", []string{"traceparent", "00-" + tp + "-00f067aa0ba902b7-01", "X-Cycles-Trace-Id", flat}, tp},
		{"malformed traceparent falls through", []string{"traceparent", "00-zz-00f067aa0ba902b7-01", "X-Cycles-Trace-Id", flat}, flat},
		{"all-zero ids are invalid", []string{"X-Cycles-Trace-Id", strings.Repeat("0", 32)}, ""},
		{"none", nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f.t = t
			for _, path := range []string{"/v1/balances?workspace=prod", "/v1/balances"} { // 200, then 400
				r := f.call("GET", path, f.tenant, "", tc.kv...)
				got := r.header.Get("X-Cycles-Trace-Id")
				if len(got) != 32 || got == strings.Repeat("0", 32) || (tc.want != "" && got != tc.want) {
					t.Fatalf("%s: X-Cycles-Trace-Id %q, want %q", path, got, tc.want)
				}
				if r.header.Get("X-Request-Id") != "req-test" {
					t.Fatalf("X-Request-Id %q", r.header.Get("X-Request-Id"))
				}
				if r.status == 400 && r.obj(t)["trace_id"] != got {
					t.Fatalf("error trace_id %v != header %s", r.obj(t)["trace_id"], got)
				}
			}
		})
	}
	f.t = t
	// A request id is made when none (or an unusable one) is sent.
	r := f.call("GET", "/v1/balances?workspace=prod", f.tenant, "", "X-Request-Id", "has spaces")
	if id := r.header.Get("X-Request-Id"); id == "" || id == "has spaces" {
		t.Fatalf("X-Request-Id %q", id)
	}
}

// One ledger behind both wires: reserve over HTTP, commit over gRPC, read
// over HTTP; the replay over HTTP of the HTTP reserve still answers.
func TestOneLedgerBothWires(t *testing.T) {
	f := funded(t, 1000)
	rid := f.reserve("k", 100)
	ctx := grpctest.AsTenant(metadata.NewOutgoingContext(context.Background(), metadata.MD{}), f.tenant)
	if _, err := f.grpc.CommitReservation(ctx, &cyclesv1.CommitReservationRequest{ReservationId: rid, IdempotencyKey: "c",
		Actual: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 30}}); err != nil {
		t.Fatal(err)
	}
	r := f.call("GET", "/v1/balances?tenant="+f.tenant, f.tenant, "")
	if !bytes.Contains(r.body, []byte(`"spent":{"unit":"TOKENS","amount":30}`)) || !bytes.Contains(r.body, []byte(`"remaining":{"unit":"TOKENS","amount":970}`)) {
		t.Fatalf("balances %s", r.body)
	}
	// The same commit key over HTTP is the gRPC commit's replay.
	r = f.call("POST", "/v1/reservations/"+rid+"/commit", f.tenant, `{"idempotency_key":"c","actual":{"unit":"TOKENS","amount":30}}`)
	if r.status != 200 || r.obj(t)["charged"].(map[string]any)["amount"] != json.Number("30") {
		t.Fatalf("replay over HTTP %d %s", r.status, r.body)
	}
	ledgertest.CheckInvariants(t, f.c, f.tenant)
}

// Reservations of another tenant: 403 when they exist, 404 when not.
func TestOtherTenantsReservations(t *testing.T) {
	e := start(t, redistest.SharedClient(t))
	a := e.fixture()
	b := e.fixture()
	a.budget("", ledgertest.Budget{Allocated: 100})
	rid := a.reserve("k", 10)
	missing := rid[:len(rid)-32] + strings.Repeat("0", 32)
	before := ledgertest.Dump(t, e.c, a.tenant)
	for _, c := range []struct{ method, suffix, body string }{
		{"GET", "", ""},
		{"POST", "/commit", `{"idempotency_key":"c","actual":{"unit":"TOKENS","amount":1}}`},
		{"POST", "/release", `{"idempotency_key":"r"}`},
		{"POST", "/extend", `{"idempotency_key":"x","extend_by_ms":1000}`},
	} {
		if r := b.call(c.method, "/v1/reservations/"+rid+c.suffix, b.tenant, c.body); r.status != 403 || r.obj(t)["error"] != "FORBIDDEN" {
			t.Errorf("%s%s: %d %s", c.method, c.suffix, r.status, r.body)
		}
		if r := b.call(c.method, "/v1/reservations/"+missing+c.suffix, b.tenant, c.body); r.status != 404 || r.obj(t)["error"] != "NOT_FOUND" {
			t.Errorf("%s%s missing: %d %s", c.method, c.suffix, r.status, r.body)
		}
	}
	if after := ledgertest.Dump(t, e.c, a.tenant); after != before {
		t.Fatal("tenant A changed")
	}
}

// Redis unreachable: 503 INTERNAL_ERROR (reason UNAVAILABLE), fail closed.
func TestUnavailable(t *testing.T) {
	srv := redistest.Start(t)
	e := start(t, srv.Client(t))
	f := e.fixture()
	srv.Kill()
	r := f.call("POST", "/v1/reservations", f.tenant, reserveBody("k", 1))
	if r.status != 503 || r.obj(t)["error"] != "INTERNAL_ERROR" || r.obj(t)["details"].(map[string]any)["reason"] != "UNAVAILABLE" {
		t.Fatalf("%d %s", r.status, r.body)
	}
}

// Paths the wire does not serve answer a JSON 404.
func TestUnknownPath(t *testing.T) {
	e := start(t, redistest.SharedClient(t))
	r := e.call("GET", "/v1/nothing-here", "", "")
	if r.status != 404 || r.obj(t)["error"] != "NOT_FOUND" {
		t.Fatalf("%d %s", r.status, r.body)
	}
}

// The rate-limit guard is the gRPC one: over the limit an HTTP caller gets
// 429 LIMIT_EXCEEDED with Retry-After and the X-RateLimit headers, never a
// budget code, and nothing is reserved.
func TestThrottled(t *testing.T) {
	c := redistest.SharedClient(t)
	ex := scripttest.Shared(t)
	lim := ratelimit.New(ex, ratelimit.Options{})
	policy := "http-guard-" + ledgertest.NewTenantID(t)
	if _, err := lim.CreatePolicy(context.Background(), ratelimit.Policy{Name: policy, Algorithm: ratelimit.SlidingLog, Limit: 2, WindowMs: 60_000}); err != nil {
		t.Fatal(err)
	}
	e := start(t, c, func(o *server.Options) { o.Guard = server.RateLimitGuard(lim, ratelimit.GuardConfig{Policy: policy}) })
	f := e.fixture()
	f.budget("", ledgertest.Budget{Allocated: 1000})
	for i := 0; i < 2; i++ {
		r := f.call("POST", "/v1/reservations", f.tenant, reserveBody("k"+itoa(int64(i)), 1))
		if r.status != 200 || r.header.Get("X-Ratelimit-Remaining") == "" {
			t.Fatalf("call %d: %d %v %s", i, r.status, r.header, r.body)
		}
	}
	before := ledgertest.Dump(t, c, f.tenant)
	r := f.call("POST", "/v1/reservations", f.tenant, reserveBody("k9", 1))
	if r.status != 429 || r.obj(t)["error"] != "LIMIT_EXCEEDED" || r.header.Get("Retry-After") == "" {
		t.Fatalf("throttled call: %d %v %s", r.status, r.header, r.body)
	}
	if after := ledgertest.Dump(t, c, f.tenant); after != before {
		t.Fatal("a throttled call changed Redis")
	}
}

// HTTP calls write the chain's one log line, marked with their wire and
// route, carrying the refusal reason; bodies and keys are never logged.
func TestLoggedByTheChain(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	e := start(t, redistest.SharedClient(t), func(o *server.Options) { o.Logger = zap.New(core) })
	f := e.fixture()
	f.budget("", ledgertest.Budget{Allocated: 10})
	if r := f.call("POST", "/v1/reservations", f.tenant, reserveBody("secret-idem-key", 11)); r.status != 409 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	var line *observer.LoggedEntry
	for _, l := range logs.All() {
		if l.ContextMap()["transport"] == "http" {
			line = &l
		}
	}
	if line == nil {
		t.Fatalf("no HTTP log line in %v", logs.All())
	}
	m := line.ContextMap()
	if m["http.route"] != "POST /v1/reservations" || m["reason"] != "BUDGET_EXCEEDED" || m["request_id"] != "req-test" || m["tenant"] != f.tenant {
		t.Fatalf("log fields %v", m)
	}
	for _, l := range logs.All() {
		for k, v := range l.ContextMap() {
			if s, ok := v.(string); ok && (strings.Contains(s, "secret-idem-key") || strings.Contains(s, grpctest.APIKey(f.tenant))) {
				t.Fatalf("log field %s leaks a body or key: %v", k, s)
			}
		}
	}
}
