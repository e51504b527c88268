package cycleshttp_test

import (
	"crypto/sha1" //nolint:gosec // the protocol's correlation ids are a grouping hash, not a secret
	"encoding/hex"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/events"
)

// corrOf is the hashed correlation id of lua/lib/correlation.lua, computed
// here independently: 'cor_' and the first 32 hex digits of the SHA-1 of the
// length-prefixed inputs.
func corrOf(parts ...string) string {
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(strconv.Itoa(len(p)) + ":" + p)
	}
	sum := sha1.Sum([]byte(b.String())) //nolint:gosec // see the import
	return "cor_" + hex.EncodeToString(sum[:])[:32]
}

// evOut is one event of an HTTP listing, in the fields this test reads.
type evOut struct {
	typ, corr, scope string
	data             map[string]any
	raw              map[string]any
}

// adminEvents lists tenant's events over GET /v1/admin/events with the extra
// query q (oldest first, every page).
func (e *env) adminEvents(t *testing.T, tenant string, q url.Values) []evOut {
	t.Helper()
	q.Set("tenant_id", tenant)
	var out []evOut
	for page := 0; page < 50; page++ {
		r := e.call("GET", "/v1/admin/events?"+q.Encode(), "", "", "X-Admin-API-Key", adminKey)
		if r.status != 200 {
			t.Fatalf("events %v: %d %s", q, r.status, r.body)
		}
		m := r.obj(t)
		evs, _ := m["events"].([]any)
		for _, x := range evs {
			ev := x.(map[string]any)
			o := evOut{raw: ev}
			o.typ, _ = ev["event_type"].(string)
			o.corr, _ = ev["correlation_id"].(string)
			o.scope, _ = ev["scope"].(string)
			o.data, _ = ev["data"].(map[string]any)
			out = append(out, o)
		}
		if m["has_more"] != true {
			return out
		}
		q.Set("cursor", m["next_cursor"].(string))
	}
	t.Fatal("event listing does not end")
	return nil
}

func typesOf(evs []evOut) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.typ)
	}
	return out
}

// TestCorrelationIDs: the correlation ids the emitting scripts set, read
// back on the HTTP event JSON and on gRPC, and the correlation_id filter of
// the event listings on both wires (docs/protocol.md#correlation-ids).
func TestCorrelationIDs(t *testing.T) {
	e := startFull(t)
	as := []string{"X-Admin-API-Key", adminKey}
	f := e.v026Fixture(t, false)
	const run, kind = "run-abc-123", "message.email.send"
	c := v026Case{id: "corr", kind: kind, counted: 2,
		policy: `"action_quotas":[{"action_kind":"` + kind + `","max_calls":2,"window":"per_run","threshold_pct":0.5}]`}
	e.v026State(t, f, &c) // two live counts: the threshold is crossed, the counter is full
	reserve := func(path, key, body string, status int) {
		t.Helper()
		if r := e.call("POST", path, "", body, "X-Cycles-API-Key", f.secret); r.status != status {
			t.Fatalf("%s %s: %d %s", path, key, r.status, r.body)
		}
	}
	quotaCase := func(id, observe string, dry bool) string {
		cc := c
		cc.id, cc.estimate, cc.observe, cc.dryRun = id, 100, observe, dry
		return cc.body(id)
	}
	reserve("/v1/reservations", "dry", quotaCase("dry", "", true), 200)              // reservation.denied
	reserve("/v1/reservations", "observed", quotaCase("obs", "OBSERVE", false), 200) // reservation.observed_denied
	reserve("/v1/reservations", "live", quotaCase("live", "", false), 409)           // refused: no event
	reserve("/v1/decide", "decide", `{"idempotency_key":"dec","subject":{"agent":"support-bot","dimensions":{"run_id":"`+run+`"}},`+
		`"action":{"kind":"`+kind+`","name":"d"},"estimate":{"unit":"USD_MICROCENTS","amount":100}}`, 200) // reservation.denied
	if r := e.call("POST", "/v1/admin/action-quota-counters/reset", "", `{"tenant_id":"`+f.tenant+`","scope":"`+f.agentScope+
		`","action_kind":"`+kind+`","window":"per_run","window_key":"`+run+`","reason":"test"}`, as...); r.status != 200 {
		t.Fatalf("reset: %d %s", r.status, r.body)
	}
	// Budget denials (no quota: another kind), observed and dry, and
	// observed allows with and without a run id.
	other := func(id, subject, observe string, amount int, dry bool) string {
		b := `{"idempotency_key":"` + id + `","subject":` + subject + `,"action":{"kind":"llm.completion","name":"m"},` +
			`"estimate":{"unit":"USD_MICROCENTS","amount":` + strconv.Itoa(amount) + `}`
		if observe != "" {
			b += `,"observe_mode":"` + observe + `"`
		}
		if dry {
			b += `,"dry_run":true`
		}
		return b + "}"
	}
	withRun := `{"agent":"support-bot","dimensions":{"run_id":"` + run + `"}}`
	reserve("/v1/reservations", "budget observed", other("b-obs", withRun, "OBSERVE", 60000, false), 200)
	reserve("/v1/reservations", "budget dry", other("b-dry", withRun, "", 60000, true), 200)
	reserve("/v1/reservations", "allowed with run", other("a-run", withRun, "OBSERVE", 10, false), 200)
	reserve("/v1/reservations", "allowed without run", other("a-none", `{"agent":"support-bot"}`, "OBSERVE", 10, false), 200)

	all := e.adminEvents(t, f.tenant, url.Values{})
	quota := corrOf("ACTION_QUOTA_EXCEEDED", f.tenant, f.agentScope, kind, "per_run", run)
	budgetDeny := ""
	for _, ev := range all {
		if ev.typ == "reservation.observed_denied" && ev.data["deny_detail"].(map[string]any)["reason_code"] == "BUDGET_EXCEEDED" {
			dd := ev.data["deny_detail"].(map[string]any)
			budgetDeny = corrOf("BUDGET_EXCEEDED", f.tenant, dd["blocked_by_scope"].(string), "llm.completion", "", "", "")
		}
	}
	if budgetDeny == "" {
		t.Fatalf("no observed budget denial among %v", typesOf(all))
	}
	runCorr := corrOf("reservation.observed_allowed", f.tenant, f.agentScope, run)

	// Every event of the tenant, in order, with the id it must carry.
	want := []struct{ typ, corr string }{
		{"tenant.created", ""}, {"api_key.created", ""}, {"budget.created", ""}, {"budget.created", ""},
		{"policy.created", ""},
		{"quota.threshold_approaching", quota},
		{"reservation.denied", quota},          // dry run
		{"reservation.observed_denied", quota}, // observed
		{"reservation.denied", quota},          // decide
		{"quota.counter_reset", quota},
		{"reservation.observed_denied", budgetDeny},
		{"reservation.denied", budgetDeny},
		{"reservation.observed_allowed", runCorr},
		{"reservation.observed_allowed", ""}, // no run id: no id
	}
	if len(all) != len(want) {
		t.Fatalf("events %v, want %d", typesOf(all), len(want))
	}
	for i, w := range want {
		got := all[i]
		if got.typ != w.typ || got.corr != w.corr {
			t.Errorf("event %d: %s %q, want %s %q", i, got.typ, got.corr, w.typ, w.corr)
		}
		if _, present := got.raw["correlation_id"]; present != (w.corr != "") {
			t.Errorf("event %d (%s): correlation_id present %v in the HTTP JSON, want %v", i, got.typ, present, w.corr != "")
		}
	}

	// The filter, on both wires: admin HTTP, tenant HTTP (tenant-visible
	// categories only), admin gRPC.
	evc := cyclesv1.NewEventServiceClient(e.conn)
	for _, fc := range []struct {
		name, corr       string
		admin, tenantKey []string
	}{
		{"a quota window", quota,
			[]string{"quota.threshold_approaching", "reservation.denied", "reservation.observed_denied", "reservation.denied", "quota.counter_reset"},
			[]string{"reservation.denied", "reservation.observed_denied", "reservation.denied"}},
		{"a budget denial", budgetDeny, []string{"reservation.observed_denied", "reservation.denied"},
			[]string{"reservation.observed_denied", "reservation.denied"}},
		{"a run", runCorr, []string{"reservation.observed_allowed"}, []string{"reservation.observed_allowed"}},
		{"an unknown id", "cor_nothing", nil, nil},
	} {
		t.Run("filter/"+fc.name, func(t *testing.T) {
			if got := typesOf(e.adminEvents(t, f.tenant, url.Values{"correlation_id": {fc.corr}, "limit": {"2"}})); !slices.Equal(got, fc.admin) {
				t.Errorf("admin HTTP: %v, want %v", got, fc.admin)
			}
			r := e.call("GET", "/v1/events?correlation_id="+url.QueryEscape(fc.corr), "", "", "X-Cycles-API-Key", f.secret)
			if r.status != 200 {
				t.Fatalf("tenant HTTP: %d %s", r.status, r.body)
			}
			var got []string
			evs, _ := r.obj(t)["events"].([]any)
			for _, x := range evs {
				got = append(got, x.(map[string]any)["event_type"].(string))
			}
			if !slices.Equal(got, fc.tenantKey) {
				t.Errorf("tenant HTTP: %v, want %v", got, fc.tenantKey)
			}
			g, err := evc.ListEvents(adminCtx(), &cyclesv1.ListEventsRequest{TenantId: f.tenant, CorrelationId: fc.corr, Limit: 200})
			if err != nil {
				t.Fatal(err)
			}
			got = nil
			for _, ev := range g.GetEvents() {
				got = append(got, ev.GetEventType())
				if ev.GetCorrelationId() != fc.corr {
					t.Errorf("gRPC %s: correlation_id %q", ev.GetEventType(), ev.GetCorrelationId())
				}
			}
			if !slices.Equal(got, fc.admin) {
				t.Errorf("admin gRPC: %v, want %v", got, fc.admin)
			}
		})
	}
	long := strings.Repeat("c", events.MaxCorrelationIDLen+1)
	if r := e.call("GET", "/v1/admin/events?tenant_id="+f.tenant+"&correlation_id="+long, "", "", as...); r.status != 400 ||
		!strings.Contains(string(r.body), "correlation_id") {
		t.Errorf("over-long filter over HTTP: %d %s", r.status, r.body)
	}
	if _, err := evc.ListEvents(adminCtx(), &cyclesv1.ListEventsRequest{TenantId: f.tenant, CorrelationId: long}); err == nil ||
		!strings.Contains(err.Error(), "correlation_id") {
		t.Errorf("over-long filter over gRPC: %v", err)
	}
}

// TestCorrelationIDsOfCloseAndBulk: a tenant close and its cascade share
// tenant_close_cascade:<tenant>:<request id>; a bulk action's rows carry
// <plane>_bulk_action:<action>:<request id> (a bulk close's cascade keeps the
// cascade id). The events are read over HTTP; TestCorrelationIDs reads the
// same envelope field over gRPC.
func TestCorrelationIDsOfCloseAndBulk(t *testing.T) {
	e := startFull(t)
	as := []string{"X-Admin-API-Key", adminKey}
	openReservation := func(f v026Fixture) {
		t.Helper()
		body := `{"idempotency_key":"open","subject":{"agent":"support-bot"},"action":{"kind":"llm.completion","name":"m"},` +
			`"estimate":{"unit":"USD_MICROCENTS","amount":10}}`
		if r := e.call("POST", "/v1/reservations", "", body, "X-Cycles-API-Key", f.secret); r.status != 200 {
			t.Fatalf("reserve: %d %s", r.status, r.body)
		}
	}
	corrs := func(tenant string, types ...string) []string {
		t.Helper()
		var out []string
		for _, ev := range e.adminEvents(t, tenant, url.Values{"event_type": {strings.Join(types, ",")}}) {
			out = append(out, ev.typ+"="+ev.corr)
		}
		return out
	}

	t.Run("single close", func(t *testing.T) {
		f := e.v026Fixture(t, false)
		openReservation(f)
		if r := e.call("PATCH", "/v1/admin/tenants/"+f.tenant, "", `{"status":"CLOSED"}`, append(as, "X-Request-Id", "req-close-1")...); r.status != 200 {
			t.Fatalf("close: %d %s", r.status, r.body)
		}
		id := "tenant_close_cascade:" + f.tenant + ":req-close-1"
		want := []string{"tenant.closed=" + id, "reservation.released_via_tenant_cascade=" + id}
		if got := corrs(f.tenant, "tenant.closed", "reservation.released_via_tenant_cascade"); !slices.Equal(got, want) {
			t.Errorf("%v, want %v", got, want)
		}
	})
	t.Run("bulk close over HTTP", func(t *testing.T) {
		f := e.v026Fixture(t, false)
		openReservation(f)
		body := `{"filter":{"search":"` + f.tenant + `"},"action":"CLOSE","expected_count":1,"idempotency_key":"bc"}`
		if r := e.call("POST", "/v1/admin/tenants/bulk-action", "", body, append(as, "X-Request-Id", "req-bulk-1")...); r.status != 200 ||
			len(r.obj(t)["succeeded"].([]any)) != 1 {
			t.Fatalf("bulk close: %d %s", r.status, r.body)
		}
		want := []string{"tenant.closed=tenant_bulk_action:close:req-bulk-1",
			"reservation.released_via_tenant_cascade=tenant_close_cascade:" + f.tenant + ":req-bulk-1"}
		if got := corrs(f.tenant, "tenant.closed", "reservation.released_via_tenant_cascade"); !slices.Equal(got, want) {
			t.Errorf("%v, want %v", got, want)
		}
	})
	t.Run("bulk suspend", func(t *testing.T) {
		f := e.v026Fixture(t, false)
		body := `{"filter":{"search":"` + f.tenant + `"},"action":"SUSPEND","idempotency_key":"bs"}`
		if r := e.call("POST", "/v1/admin/tenants/bulk-action", "", body, append(as, "X-Request-Id", "req-bulk-s")...); r.status != 200 ||
			len(r.obj(t)["succeeded"].([]any)) != 1 {
			t.Fatalf("bulk suspend: %d %s", r.status, r.body)
		}
		want := []string{"tenant.suspended=tenant_bulk_action:suspend:req-bulk-s"}
		if got := corrs(f.tenant, "tenant.suspended"); !slices.Equal(got, want) {
			t.Errorf("%v, want %v", got, want)
		}
	})
	t.Run("bulk credit over HTTP", func(t *testing.T) {
		f := e.v026Fixture(t, false)
		body := `{"filter":{"tenant_id":"` + f.tenant + `","unit":"USD_MICROCENTS"},"action":"CREDIT",` +
			`"amount":{"unit":"USD_MICROCENTS","amount":5},"expected_count":2,"idempotency_key":"bf"}`
		if r := e.call("POST", "/v1/admin/budgets/bulk-action", "", body, append(as, "X-Request-Id", "req-bulk-2")...); r.status != 200 ||
			len(r.obj(t)["succeeded"].([]any)) != 2 {
			t.Fatalf("bulk credit: %d %s", r.status, r.body)
		}
		id := "budget_bulk_action:credit:req-bulk-2"
		want := []string{"budget.funded=" + id, "budget.funded=" + id}
		if got := corrs(f.tenant, "budget.funded"); !slices.Equal(got, want) {
			t.Errorf("%v, want %v", got, want)
		}
		// The whole fan-out by its id.
		if got := e.adminEvents(t, f.tenant, url.Values{"correlation_id": {id}}); len(got) != 2 {
			t.Errorf("by correlation id: %v", typesOf(got))
		}
	})
}
