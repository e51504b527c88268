package cycleshttp_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/admin"
	"github.com/cyclesgo/cycles-go/internal/api/adminapi"
	"github.com/cyclesgo/cycles-go/internal/api/auditapi"
	"github.com/cyclesgo/cycles-go/internal/api/authapi"
	"github.com/cyclesgo/cycles-go/internal/api/cycleshttp"
	"github.com/cyclesgo/cycles-go/internal/api/eventsapi"
	"github.com/cyclesgo/cycles-go/internal/api/operatorapi"
	"github.com/cyclesgo/cycles-go/internal/api/overviewapi"
	"github.com/cyclesgo/cycles-go/internal/api/policyapi"
	"github.com/cyclesgo/cycles-go/internal/api/runtimeapi"
	"github.com/cyclesgo/cycles-go/internal/audit"
	"github.com/cyclesgo/cycles-go/internal/bulk"
	"github.com/cyclesgo/cycles-go/internal/events"
	"github.com/cyclesgo/cycles-go/internal/ledger"
	"github.com/cyclesgo/cycles-go/internal/overview"
	"github.com/cyclesgo/cycles-go/internal/permission"
	"github.com/cyclesgo/cycles-go/internal/policy"
	"github.com/cyclesgo/cycles-go/internal/server"
	"github.com/cyclesgo/cycles-go/test/grpctest"
	"github.com/cyclesgo/cycles-go/test/httpjson"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
	"github.com/cyclesgo/cycles-go/test/redistest"
	"github.com/cyclesgo/cycles-go/test/scripttest"
)

const adminKey = "http-admin-key-0123456789"

// startFull serves runtime, admin and events with the real key verifier
// (internal/admin), as cyclesd does.
func startFull(t *testing.T) *env {
	t.Helper()
	c := redistest.SharedClient(t)
	ex := scripttest.Shared(t)
	led := ledger.New(ex, ledger.Options{})
	adm := admin.New(ex, admin.Options{Releaser: led})
	aud := audit.New(ex, audit.Options{})
	svcs := server.Services{Runtime: runtimeapi.New(led), Admin: adminapi.New(adm), Events: eventsapi.New(events.New(ex, events.Options{})),
		Audit: auditapi.New(aud), Policy: policyapi.New(policy.New(ex, policy.Options{})), Auth: authapi.New(adm),
		QuotaCounters: policyapi.NewQuotaCounters(policy.New(ex, policy.Options{})),
		Overview:      overviewapi.New(overview.New(ex, overview.Options{}))}
	srv := server.New(server.Options{Verifier: adm, AdminKey: adminKey, RequestTimeout: 5 * time.Second, Audit: aud}, svcs)
	t.Cleanup(srv.GRPC.Stop) // its stream workers run until Stop, served or not
	hs := srv.NewHTTP(server.HTTPOptions{})
	svcs.Operator = operatorapi.New(bulk.New(ex, adm, aud))
	hs.Handle("/v1/", cycleshttp.New(cycleshttp.Options{Invoker: srv, Services: svcs}))
	base := httpjson.Serve(t, hs)
	conn := grpctest.Serve(t, srv.GRPC)
	return &env{t: t, c: c, base: base, grpc: cyclesv1.NewRuntimeServiceClient(conn), conn: conn}
}

// The quickstart over HTTP: the admin creates a tenant, a key and a budget,
// funds it; the tenant key reserves; freeze refuses; events and
// introspection answer; revocation locks the key out; closing the tenant
// releases its holds.
func TestAdminQuickstart(t *testing.T) {
	e := startFull(t)
	tenant := strings.ReplaceAll(ledgertest.NewTenantID(t), "_", "-")
	as := []string{"X-Admin-API-Key", adminKey}

	tn := e.call("POST", "/v1/admin/tenants", "", `{"tenant_id":"`+tenant+`","name":"Acme","default_reservation_ttl_ms":30000}`, as...).must(t, 201, "create tenant")
	onlyKeys(t, "tenant", tn, "tenant_id", "name", "status", "default_commit_overage_policy", "default_reservation_ttl_ms",
		"max_reservation_ttl_ms", "max_reservation_extensions", "metadata", "created_at", "updated_at", "closed_at")
	if tn["status"] != "ACTIVE" || tn["default_reservation_ttl_ms"] != json.Number("30000") {
		t.Fatalf("tenant %v", tn)
	}
	e.call("GET", "/v1/admin/tenants/"+tenant, "", "", as...).must(t, 200, "get tenant")
	tl := e.call("GET", "/v1/admin/tenants?status=ACTIVE&search="+strings.ToUpper(tenant), "", "", as...).must(t, 200, "list tenants")
	onlyKeys(t, "tenant list", tl, "tenants", "next_cursor", "has_more")
	if ts := tl["tenants"].([]any); len(ts) != 1 || ts[0].(map[string]any)["tenant_id"] != tenant || tl["has_more"] != false {
		t.Fatalf("tenant list %v", tl)
	}
	if tl := e.call("GET", "/v1/admin/tenants?status=SUSPENDED&search="+tenant, "", "", as...).must(t, 200, "list suspended"); len(tl["tenants"].([]any)) != 0 {
		t.Fatalf("suspended list %v", tl)
	}
	for _, q := range []string{"status=GONE", "parent_tenant_id=p", "limit=-1", "cursor=x"} {
		if r := e.call("GET", "/v1/admin/tenants?"+q, "", "", as...); r.status != 400 || r.obj(t)["details"].(map[string]any)["field"] != strings.Split(q, "=")[0] {
			t.Fatalf("list tenants ?%s: %d %s", q, r.status, r.body)
		}
	}
	// A page size above the maximum is served as the maximum (the dashboard
	// asks for 1,000 tenants).
	if tl := e.call("GET", "/v1/admin/tenants?limit=1000&search="+tenant, "", "", as...).must(t, 200, "list over the max"); len(tl["tenants"].([]any)) != 1 {
		t.Fatalf("tenant list over the max page size: %v", tl)
	}
	if r := e.call("POST", "/v1/admin/tenants", "", `{"tenant_id":"`+tenant+`","name":"Acme"}`); r.status != 401 {
		t.Fatalf("tenant create without the admin key: %d %s", r.status, r.body)
	}
	if r := e.call("POST", "/v1/admin/tenants", "", `{"tenant_id":"x-`+tenant+`","name":"A","parent_tenant_id":"p"}`, as...); r.status != 400 {
		t.Fatalf("unsupported field: %d %s", r.status, r.body)
	}

	k := e.call("POST", "/v1/admin/api-keys", "", `{"tenant_id":"`+tenant+`","name":"agent"}`, as...).must(t, 201, "create key")
	if r := e.call("GET", "/v1/admin/tenants", "", "", "X-Cycles-API-Key", k["key_secret"].(string)); r.status != 401 {
		t.Fatalf("list tenants with a tenant key: %d %s", r.status, r.body)
	}
	kl := e.call("GET", "/v1/admin/api-keys?tenant_id="+tenant+"&status=ACTIVE&sort_by=name", "", "", as...).must(t, 200, "list keys")
	onlyKeys(t, "key list", kl, "keys", "next_cursor", "has_more")
	if ks := kl["keys"].([]any); len(ks) != 1 || kl["has_more"] != false {
		t.Fatalf("key list %v", kl)
	} else {
		onlyKeys(t, "listed key", ks[0].(map[string]any), "key_id", "key_prefix", "tenant_id", "name", "permissions", "status", "created_at", "expires_at", "revoked_at")
		if ks[0].(map[string]any)["key_id"] != k["key_id"] || ks[0].(map[string]any)["key_secret"] != nil {
			t.Fatalf("listed key %v, created %v", ks[0], k)
		}
	}
	for _, st := range []string{"REVOKED", "EXPIRED"} {
		if kl := e.call("GET", "/v1/admin/api-keys?tenant_id="+tenant+"&status="+st, "", "", as...).must(t, 200, "list "+st); len(kl["keys"].([]any)) != 0 {
			t.Fatalf("%s keys %v", st, kl)
		}
	}
	if kl := e.call("GET", "/v1/admin/api-keys?limit=1", "", "", as...).must(t, 200, "list every tenant's keys"); len(kl["keys"].([]any)) != 1 || kl["has_more"] != true {
		t.Fatalf("all-tenant key list %v", kl)
	}
	for _, q := range []string{"tenant_id=Bad!", "tenant_id=" + tenant + "&status=GONE", "tenant_id=" + tenant + "&limit=-1", "tenant_id=" + tenant + "&cursor=x"} {
		field := "tenant_id"
		if strings.Contains(q, "&") {
			field = strings.Split(strings.Split(q, "&")[1], "=")[0]
		}
		if r := e.call("GET", "/v1/admin/api-keys?"+q, "", "", as...); r.status != 400 || r.obj(t)["details"].(map[string]any)["field"] != field {
			t.Fatalf("list keys ?%s: %d %s", q, r.status, r.body)
		}
	}
	if r := e.call("GET", "/v1/admin/api-keys?tenant_id="+tenant, "", "", "X-Cycles-API-Key", k["key_secret"].(string)); r.status != 401 {
		t.Fatalf("list keys with a tenant key: %d %s", r.status, r.body)
	}
	if r := e.call("GET", "/v1/admin/api-keys?tenant_id=nobody-here", "", "", as...); r.status != 404 || r.obj(t)["error"] != "TENANT_NOT_FOUND" {
		t.Fatalf("list keys of an unknown tenant: %d %s", r.status, r.body)
	}
	onlyKeys(t, "key", k, "key_id", "key_secret", "key_prefix", "tenant_id", "permissions", "created_at", "expires_at")
	secret := k["key_secret"].(string)
	if k["expires_at"] != "9999-12-31T23:59:59.999Z" || fmt.Sprint(k["permissions"]) != fmt.Sprint(anySlice(permission.Default)) {
		t.Fatalf("a key created without permissions or expiry: %v", k)
	}
	ro := e.call("POST", "/v1/admin/api-keys", "", `{"tenant_id":"`+tenant+`","name":"ro","permissions":["balances:read"],"expires_at":"2999-01-01T00:00:00Z"}`, as...).must(t, 201, "narrow key")
	if fmt.Sprint(ro["permissions"]) != "[balances:read]" || ro["expires_at"] != "2999-01-01T00:00:00.000Z" {
		t.Fatalf("narrow key %v", ro)
	}
	if r := e.call("POST", "/v1/admin/api-keys", "", `{"tenant_id":"`+tenant+`","name":"x","permissions":["budgets:spend"]}`, as...); r.status != 400 || r.obj(t)["details"].(map[string]any)["field"] != "permissions[0]" {
		t.Fatalf("unknown permission: %d %s", r.status, r.body)
	}
	if r := e.call("POST", "/v1/admin/api-keys", "", `{"tenant_id":"`+tenant+`","name":"x","expires_at":"2001-01-01T00:00:00Z"}`, as...); r.status != 400 || r.obj(t)["details"].(map[string]any)["field"] != "expires_at" {
		t.Fatalf("expiry in the past: %d %s", r.status, r.body)
	}

	scope := "tenant:" + tenant
	b := e.call("POST", "/v1/admin/budgets", "", `{"scope":"`+scope+`","unit":"TOKENS","allocated":{"unit":"TOKENS","amount":1000}}`, as...).must(t, 201, "create budget")
	onlyKeys(t, "ledger", b, "ledger_id", "tenant_id", "scope", "scope_path", "unit", "allocated", "remaining", "reserved", "spent",
		"debt", "overdraft_limit", "is_over_limit", "commit_overage_policy", "status", "created_at", "updated_at")
	if b["tenant_id"] != tenant || b["scope"] != scope || b["scope_path"] != scope || b["ledger_id"] != scope+"|TOKENS" {
		t.Fatalf("budget identity: tenant_id %v scope %v scope_path %v ledger_id %v", b["tenant_id"], b["scope"], b["scope_path"], b["ledger_id"])
	}
	f := e.call("POST", "/v1/admin/budgets/fund?scope="+scope+"&unit=TOKENS", "",
		`{"operation":"CREDIT","amount":{"unit":"TOKENS","amount":9007199254740993},"idempotency_key":"f1"}`, as...).must(t, 200, "fund")
	if f["new_allocated"].(map[string]any)["amount"] != json.Number("9007199254741993") {
		t.Fatalf("fund %v", f)
	}

	key := []string{"X-Cycles-API-Key", secret}
	reserve := `{"idempotency_key":"r1","subject":{"workspace":"prod"},"action":{"kind":"k","name":"n"},"estimate":{"unit":"TOKENS","amount":10}}`
	res := e.call("POST", "/v1/reservations", "", reserve, key...).must(t, 200, "reserve with the new key")
	if res["remaining_ttl_ms"] != json.Number("30000") {
		t.Fatalf("tenant default TTL not applied: %v", res)
	}
	e.call("POST", "/v1/admin/budgets/freeze?scope="+scope+"&unit=TOKENS", "", "", as...).must(t, 200, "freeze")
	if r := e.call("POST", "/v1/reservations", "", strings.Replace(reserve, "r1", "r2", 1), key...); r.status != 409 || r.obj(t)["error"] != "BUDGET_FROZEN" {
		t.Fatalf("reserve on a frozen budget: %d %s", r.status, r.body)
	}
	e.call("POST", "/v1/admin/budgets/unfreeze?scope="+scope+"&unit=TOKENS", "", `{"reason":"ok"}`, as...).must(t, 200, "unfreeze")
	l := e.call("GET", "/v1/admin/budgets/lookup?scope="+scope+"&unit=TOKENS", "", "", as...).must(t, 200, "lookup")
	if l["reserved"].(map[string]any)["amount"] != json.Number("10") || l["status"] != "ACTIVE" || l["scope"] != scope || l["tenant_id"] != tenant {
		t.Fatalf("lookup %v", l)
	}
	ls := e.call("GET", "/v1/admin/budgets?tenant_id="+tenant, "", "", as...).must(t, 200, "list budgets")
	if len(ls["ledgers"].([]any)) != 1 {
		t.Fatalf("list %v", ls)
	}
	e.call("PATCH", "/v1/admin/budgets?scope="+scope+"&unit=TOKENS", "", `{"overdraft_limit":{"unit":"TOKENS","amount":50}}`, as...).must(t, 200, "update budget")

	// The default set has no events:read (the spec leaves event
	// self-service to an explicit grant); the narrow key holds only
	// balances:read.
	if r := e.call("GET", "/v1/events?category=budget", "", "", key...); r.status != 403 || r.obj(t)["details"].(map[string]any)["permission"] != "events:read" {
		t.Fatalf("events with a default key: %d %s", r.status, r.body)
	}
	roKey := []string{"X-Cycles-API-Key", ro["key_secret"].(string)}
	if r := e.call("POST", "/v1/reservations", "", strings.Replace(reserve, "r1", "r-ro", 1), roKey...); r.status != 403 || r.obj(t)["details"].(map[string]any)["permission"] != "reservations:create" {
		t.Fatalf("reserve with a balances:read key: %d %s", r.status, r.body)
	}
	e.call("GET", "/v1/balances?tenant="+tenant, "", "", roKey...).must(t, 200, "balances with a balances:read key")
	evKey := e.call("POST", "/v1/admin/api-keys", "", `{"tenant_id":"`+tenant+`","name":"ev","permissions":["events:read"]}`, as...).must(t, 201, "events key")
	key = []string{"X-Cycles-API-Key", evKey["key_secret"].(string)}
	ev := e.call("GET", "/v1/events?category=budget", "", "", key...).must(t, 200, "tenant events")
	onlyKeys(t, "event list", ev, "events", "next_cursor", "has_more")
	evs := ev["events"].([]any)
	if len(evs) == 0 {
		t.Fatal("no budget events for the tenant")
	}
	onlyKeys(t, "event", evs[0].(map[string]any), "event_id", "event_type", "category", "timestamp", "tenant_id", "scope", "actor",
		"source", "data", "request_id", "trace_id")
	e.call("GET", "/v1/admin/events?tenant_id="+tenant, "", "", as...).must(t, 200, "admin events")
	evID := evs[0].(map[string]any)["event_id"].(string)
	one := e.call("GET", "/v1/admin/events/"+evID, "", "", as...).must(t, 200, "admin event by id") // the id names its tenant
	if one["event_id"] != evID || one["tenant_id"] != tenant || one["event_type"] != evs[0].(map[string]any)["event_type"] {
		t.Fatalf("event by id %v, listed %v", one, evs[0])
	}
	for _, c := range []struct {
		path, error string
		status      int
		as          []string
	}{
		{"/v1/admin/events/evt_0123456789abcdef", "INVALID_REQUEST", 400, as},                     // an older id needs tenant_id
		{"/v1/admin/events/" + evID + "?tenant_id=other-tenant", "EVENT_NOT_FOUND", 404, as},      // not that tenant's
		{"/v1/admin/events/evt_0123456789abcdef?tenant_id=" + tenant, "EVENT_NOT_FOUND", 404, as}, // not in the log
		{"/v1/admin/events/" + evID + "?tenant_id=" + tenant, "UNAUTHORIZED", 401, key},           // a tenant key
	} {
		if r := e.call("GET", c.path, "", "", c.as...); r.status != c.status || r.obj(t)["error"] != c.error {
			t.Fatalf("%s: %d %s", c.path, r.status, r.body)
		}
	}
	if r := e.call("GET", "/v1/admin/events?tenant_id="+tenant, "", "", key...); r.status != 401 {
		t.Fatalf("admin events with a tenant key: %d %s", r.status, r.body)
	}

	in := e.call("GET", "/v1/auth/introspect", "", "", key...).must(t, 200, "introspect tenant")
	caps, _ := in["capabilities"].(map[string]any)
	if in["authenticated"] != true || in["auth_type"] != "tenant" || in["tenant_id"] != tenant || in["key_id"] != evKey["key_id"] ||
		fmt.Sprint(in["permissions"]) != "[events:read]" || caps["view_events"] != true || caps["view_budgets"] != false || caps["view_tenants"] != false {
		t.Fatalf("introspect %v", in)
	}
	if in := e.call("GET", "/v1/auth/introspect", "", "", as...).must(t, 200, "introspect admin"); in["auth_type"] != "admin" ||
		fmt.Sprint(in["permissions"]) != "[*]" || in["capabilities"].(map[string]any)["view_tenants"] != true || in["tenant_id"] != nil {
		t.Fatalf("introspect admin %v", in)
	}
	if r := e.call("GET", "/v1/auth/introspect", "", ""); r.status != 401 {
		t.Fatalf("introspect anonymous: %d", r.status)
	}

	// Webhooks: no subscription can exist (TestWireRoutes has the full table).
	if r := e.call("GET", "/v1/admin/webhooks/abc", "", "", as...); r.status != 404 || !strings.Contains(r.obj(t)["message"].(string), "WatchEvents") {
		t.Fatalf("webhook get: %d %s", r.status, r.body)
	}

	rv := e.call("DELETE", "/v1/admin/api-keys/"+k["key_id"].(string), "", "", as...).must(t, 200, "revoke")
	if rv["status"] != "REVOKED" {
		t.Fatalf("revoke %v", rv)
	}
	if kl := e.call("GET", "/v1/admin/api-keys?tenant_id="+tenant+"&status=REVOKED", "", "", as...).must(t, 200, "list revoked"); len(kl["keys"].([]any)) != 1 ||
		kl["keys"].([]any)[0].(map[string]any)["revoked_at"] == nil {
		t.Fatalf("revoked keys %v", kl)
	}
	if r := e.call("GET", "/v1/balances?tenant="+tenant, "", "", "X-Cycles-API-Key", secret); r.status != 401 {
		t.Fatalf("revoked key still works: %d %s", r.status, r.body)
	}
	if r := e.call("PATCH", "/v1/admin/tenants/"+tenant, "", `{"status":"CLOSED","name":"x"}`, as...); r.status != 400 {
		t.Fatalf("close with other changes: %d %s", r.status, r.body)
	}
	cl := e.call("PATCH", "/v1/admin/tenants/"+tenant, "", `{"status":"CLOSED"}`, as...).must(t, 200, "close tenant")
	if cl["status"] != "CLOSED" || cl["closed_at"] == nil {
		t.Fatalf("close %v", cl)
	}
	ledgertest.CheckInvariants(t, e.c, tenant)
}

// The protocol's dual-auth routes: the admin key lists (tenant required),
// reads and releases any tenant's reservations; it cannot commit one, and a
// tenant key still cannot reach another tenant's.
func TestAdminOnBehalf(t *testing.T) {
	e := startFull(t)
	f := &fixture{env: e, tenant: ledgertest.NewTenantID(t)}
	f.budget("", ledgertest.Budget{Allocated: 100})
	ledgertest.SeedTenant(t, e.c, f.tenant, ledgertest.Tenant{})
	as := []string{"X-Admin-API-Key", adminKey}
	k := e.call("POST", "/v1/admin/api-keys", "", `{"tenant_id":"`+f.tenant+`","name":"a"}`, as...).obj(t)
	key := []string{"X-Cycles-API-Key", k["key_secret"].(string)}
	r := e.call("POST", "/v1/reservations", "", reserveBody("k", 10), key...)
	if r.status != 200 {
		t.Fatalf("reserve %d %s", r.status, r.body)
	}
	rid := r.obj(t)["reservation_id"].(string)

	if r := e.call("GET", "/v1/reservations", "", "", as...); r.status != 400 || !strings.Contains(string(r.body), "tenant query parameter is required") {
		t.Fatalf("admin list without tenant: %d %s", r.status, r.body)
	}
	if r := e.call("GET", "/v1/reservations?tenant="+f.tenant, "", "", as...); r.status != 200 || len(r.obj(t)["reservations"].([]any)) != 1 {
		t.Fatalf("admin list: %d %s", r.status, r.body)
	}
	if r := e.call("GET", "/v1/reservations/"+rid, "", "", as...); r.status != 200 || r.obj(t)["status"] != "ACTIVE" {
		t.Fatalf("admin get: %d %s", r.status, r.body)
	}
	if r := e.call("POST", "/v1/reservations/"+rid+"/commit", "", `{"idempotency_key":"c","actual":{"unit":"TOKENS","amount":1}}`, as...); r.status != 401 {
		t.Fatalf("admin commit: %d %s", r.status, r.body)
	}
	if r := e.call("GET", "/v1/reservations/nope", "", "", as...); r.status != 404 {
		t.Fatalf("admin get of a malformed id: %d %s", r.status, r.body)
	}
	r = e.call("POST", "/v1/reservations/"+rid+"/release", "", `{"idempotency_key":"rel","reason":"[INCIDENT_FORCE_RELEASE]"}`, as...)
	if r.status != 200 || r.obj(t)["released"].(map[string]any)["amount"] != json.Number("10") {
		t.Fatalf("admin release: %d %s", r.status, r.body)
	}
	ledgertest.CheckInvariants(t, e.c, f.tenant)
}

func anySlice(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
