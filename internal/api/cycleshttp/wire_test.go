package cycleshttp_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/cyclesgo/cycles-go/test/ledgertest"
)

// wireCase is one request and what its answer must be.
type wireCase struct {
	name, method, path, body string
	who                      string // "admin", "tenant" (a key holding events:read), "bare" (read-only key), "" (none)
	status                   int
	errCode                  string // the body's error, when an error
	allow                    string // the Allow header, for a 405
	inMessage                string // a part of the error message
	check                    func(t *testing.T, m map[string]any)
}

// The routes this change touches: webhooks answer as a server without
// subscriptions, a known path under a wrong method is a 405 naming the right
// ones, and the actuator health paths answer.
func TestWireRoutes(t *testing.T) {
	e := startFull(t)
	tenant := strings.ReplaceAll(ledgertest.NewTenantID(t), "_", "-")
	as := []string{"X-Admin-API-Key", adminKey}
	if r := e.call("POST", "/v1/admin/tenants", "", `{"tenant_id":"`+tenant+`","name":"W"}`, as...); r.status != 201 {
		t.Fatalf("tenant: %d %s", r.status, r.body)
	}
	newKey := func(perms string) []string {
		r := e.call("POST", "/v1/admin/api-keys", "", `{"tenant_id":"`+tenant+`","name":"k","permissions":`+perms+`}`, as...)
		if r.status != 201 {
			t.Fatalf("key: %d %s", r.status, r.body)
		}
		return []string{"X-Cycles-API-Key", r.obj(t)["key_secret"].(string)}
	}
	creds := map[string][]string{"admin": as, "tenant": newKey(`["events:read"]`), "bare": newKey(`["balances:read"]`), "": nil}
	emptyList := func(t *testing.T, m map[string]any) {
		if l, ok := m["subscriptions"].([]any); !ok || len(l) != 0 || m["has_more"] != false {
			t.Errorf("want an empty list, got %v", m)
		}
	}
	const sub = "whsub_0123"
	cases := []wireCase{
		{name: "admin list", method: "GET", path: "/v1/admin/webhooks", who: "admin", status: 200, check: emptyList},
		{name: "admin list filtered", method: "GET", path: "/v1/admin/webhooks?tenant_id=" + tenant + "&status=ACTIVE", who: "admin", status: 200, check: emptyList},
		{name: "tenant list", method: "GET", path: "/v1/webhooks", who: "tenant", status: 200, check: emptyList},
		{name: "tenant list by admin", method: "GET", path: "/v1/webhooks", who: "admin", status: 200, check: emptyList},
		{name: "admin create", method: "POST", path: "/v1/admin/webhooks", body: `{"url":"https://x.example/h","event_types":["budget.created"]}`, who: "admin", status: 400, errCode: "INVALID_REQUEST", inMessage: "EventService.WatchEvents"},
		{name: "tenant create", method: "POST", path: "/v1/webhooks", body: `{"url":"https://x.example/h"}`, who: "tenant", status: 400, errCode: "INVALID_REQUEST", inMessage: "GET /v1/events"},
		{name: "admin get", method: "GET", path: "/v1/admin/webhooks/" + sub, who: "admin", status: 404, errCode: "NOT_FOUND", inMessage: sub},
		{name: "admin patch", method: "PATCH", path: "/v1/admin/webhooks/" + sub, body: `{"status":"PAUSED"}`, who: "admin", status: 404, errCode: "NOT_FOUND"},
		{name: "admin delete", method: "DELETE", path: "/v1/admin/webhooks/" + sub, who: "admin", status: 404, errCode: "NOT_FOUND"},
		{name: "admin test", method: "POST", path: "/v1/admin/webhooks/" + sub + "/test", who: "admin", status: 404, errCode: "NOT_FOUND"},
		{name: "admin deliveries", method: "GET", path: "/v1/admin/webhooks/" + sub + "/deliveries", who: "admin", status: 404, errCode: "NOT_FOUND"},
		{name: "admin replay", method: "POST", path: "/v1/admin/webhooks/" + sub + "/replay", body: `{}`, who: "admin", status: 404, errCode: "NOT_FOUND"},
		{name: "tenant get", method: "GET", path: "/v1/webhooks/" + sub, who: "tenant", status: 404, errCode: "NOT_FOUND"},
		{name: "tenant deliveries", method: "GET", path: "/v1/webhooks/" + sub + "/deliveries", who: "tenant", status: 404, errCode: "NOT_FOUND"},
		{name: "tenant delete", method: "DELETE", path: "/v1/webhooks/" + sub, who: "tenant", status: 404, errCode: "NOT_FOUND"},
		{name: "bulk matches nothing", method: "POST", path: "/v1/admin/webhooks/bulk-action", body: `{"filter":{"status":"ACTIVE"},"action":"PAUSE","idempotency_key":"b1"}`, who: "admin", status: 200,
			check: func(t *testing.T, m map[string]any) {
				if m["total_matched"] != json.Number("0") || m["action"] != "PAUSE" || m["idempotency_key"] != "b1" || len(m["succeeded"].([]any)) != 0 {
					t.Errorf("bulk: %v", m)
				}
			}},
		{name: "bulk expected count", method: "POST", path: "/v1/admin/webhooks/bulk-action", body: `{"filter":{},"action":"DELETE","expected_count":3,"idempotency_key":"b2"}`, who: "admin", status: 409, errCode: "COUNT_MISMATCH"},
		{name: "bulk bad action", method: "POST", path: "/v1/admin/webhooks/bulk-action", body: `{"filter":{},"action":"STOP","idempotency_key":"b3"}`, who: "admin", status: 400, errCode: "INVALID_REQUEST"},
		{name: "admin route, tenant key", method: "GET", path: "/v1/admin/webhooks", who: "tenant", status: 401, errCode: "UNAUTHORIZED"},
		{name: "no key", method: "GET", path: "/v1/webhooks", status: 401, errCode: "UNAUTHORIZED"},
		{name: "no key on a subscription", method: "GET", path: "/v1/admin/webhooks/" + sub, status: 401, errCode: "UNAUTHORIZED"},
		{name: "tenant key without events:read", method: "GET", path: "/v1/webhooks", who: "bare", status: 403},

		{name: "405 reservations", method: "DELETE", path: "/v1/reservations", who: "tenant", status: 405, errCode: "INVALID_REQUEST", allow: "GET, POST"},
		{name: "405 decide", method: "GET", path: "/v1/decide", status: 405, errCode: "INVALID_REQUEST", allow: "POST"},
		{name: "405 tenant", method: "DELETE", path: "/v1/admin/tenants/" + tenant, who: "admin", status: 405, errCode: "INVALID_REQUEST", allow: "GET, PATCH"},
		{name: "405 commit", method: "GET", path: "/v1/reservations/r_x/commit", status: 405, errCode: "INVALID_REQUEST", allow: "POST"},
		{name: "405 webhooks", method: "PUT", path: "/v1/admin/webhooks", who: "admin", status: 405, errCode: "INVALID_REQUEST", allow: "GET, POST"},
		{name: "unknown path stays 404", method: "GET", path: "/v1/nothing-here", status: 404, errCode: "NOT_FOUND"},
		{name: "config not served", method: "GET", path: "/v1/admin/config/webhook-security", who: "admin", status: 404, errCode: "NOT_FOUND"},

		{name: "liveness", method: "GET", path: "/actuator/health/liveness", status: 200},
		// This shell runs no Redis health watch, so it is live but not ready:
		// liveness answers UP whatever readiness says.
		{name: "readiness", method: "GET", path: "/actuator/health/readiness", status: 503},
		{name: "health", method: "GET", path: "/actuator/health", status: 503},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.call(c.method, c.path, "", c.body, creds[c.who]...)
			if r.status != c.status {
				t.Fatalf("%s %s: %d %s, want %d", c.method, c.path, r.status, r.body, c.status)
			}
			if got := r.header.Get("Allow"); got != c.allow {
				t.Errorf("Allow %q, want %q", got, c.allow)
			}
			m := r.obj(t)
			if strings.HasPrefix(c.path, "/actuator/") {
				if want := map[bool]string{true: "UP", false: "DOWN"}[c.status == 200]; m["status"] != want {
					t.Errorf("health: %v", m)
				}
				return
			}
			if c.errCode != "" {
				if m["error"] != c.errCode || m["request_id"] == "" || !strings.Contains(m["message"].(string), c.inMessage) {
					t.Errorf("error body %v, want %s mentioning %q", m, c.errCode, c.inMessage)
				}
			}
			if c.check != nil {
				c.check(t, m)
			}
		})
	}
}
