package cycleshttp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/actionkind"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
)

// v026Case restates one request/response case of the Cycles v0.1.26
// acceptance vectors (runcycles/cycles-protocol impl/test-vectors.yaml) in
// our own terms: the tenant, policy and counter state it needs, the request,
// and what the answer must say. Each case gets its own tenant with budgets
// of 1,000,000 USD_MICROCENTS at the tenant and 50,000 at the agent.
// docs/protocol.md#v0126-action-governance lists where the vector file and
// v0.1.25 disagree and what we check instead.
type v026Case struct {
	id string
	// policy: the v0.1.26 fields of the policy the vector names (JSON
	// members, "" = none); the policy governs the agent scope. Its id is
	// ours: blocked_by_policy must name it when blockedByPolicy is set.
	policy string
	// counted: live reserves of kind made before the request (the vector's
	// counter state, built through the API in its own run).
	counted        int
	tenantObserves bool
	kind           string
	estimate       int64
	dryRun         bool
	observe        string // the request's observe_mode ("" = absent)
	policyKeys     string // action.policy_keys JSON ("" = absent)

	status          int    // HTTP status
	decision        string // on 200
	code            string // error code on a refusal
	reason          string // deny_detail.reason_code ("" = no deny_detail expected)
	blockedByPolicy string
	quotaViolation  bool
	blockedByScope  bool   // deny_detail.blocked_by_scope is the agent scope
	event           string // the reservation event the request must append ("" = none)
	moves           bool   // the agent's budget moves (a live ALLOW)
}

var v026Cases = []v026Case{
	{id: "allow_happy_path", kind: "llm.completion", estimate: 5000, status: 200, decision: "ALLOW", moves: true},
	{id: "deny_action_kind_denied", policy: `"denied_action_kinds":["payment.charge","payment.refund","code.deploy"]`, kind: "payment.charge", estimate: 100000, dryRun: true,
		policyKeys: `{"host":"api.stripe.com"}`, status: 200, decision: "DENY", reason: "ACTION_KIND_DENIED",
		blockedByPolicy: "pol_sandbox_001", event: "reservation.denied"},
	{id: "deny_action_kind_not_allowed", policy: `"allowed_action_kinds":["db.query","llm.completion","llm.embedding"]`, kind: "message.email.send", estimate: 1000, dryRun: true,
		policyKeys: `{"host":"api.sendgrid.com","recipient_domain":"customer.com"}`, status: 200, decision: "DENY",
		reason: "ACTION_KIND_NOT_ALLOWED", blockedByPolicy: "pol_readonly_001", event: "reservation.denied"},
	{id: "deny_risk_class_quota", policy: `"risk_class_quotas":[{"risk_class":"external_side_effect","max_calls":50,"window":"per_hour_tumbling"}]`,
		counted: 50, kind: "message.email.send", estimate: 500, status: 409,
		code: "ACTION_QUOTA_EXCEEDED", reason: "ACTION_QUOTA_EXCEEDED", blockedByPolicy: "pol_agent_defaults", quotaViolation: true},
	{id: "deny_per_kind_quota", policy: `"action_quotas":[{"action_kind":"message.email.send","max_calls":3,"window":"per_run"}]`,
		counted: 3, kind: "message.email.send", estimate: 500, status: 409,
		code: "ACTION_QUOTA_EXCEEDED", reason: "ACTION_QUOTA_EXCEEDED", blockedByPolicy: "pol_support_agent", quotaViolation: true},
	{id: "deny_budget_exceeded", kind: "llm.completion", estimate: 500000, status: 409, code: "BUDGET_EXCEEDED",
		reason: "BUDGET_EXCEEDED", blockedByScope: true},
	{id: "observe_mode_deny", policy: `"action_quotas":[{"action_kind":"message.email.send","max_calls":3,"window":"per_run"}]`,
		counted: 3, tenantObserves: true, kind: "message.email.send", estimate: 500,
		status: 200, decision: "DENY", reason: "ACTION_QUOTA_EXCEEDED", blockedByPolicy: "pol_support_agent",
		quotaViolation: true, event: "reservation.observed_denied"},
	// Ours: the observed denial the vectors exercise with a quota, here
	// with the budget (no policies needed).
	{id: "observe_mode_deny_budget", tenantObserves: true, kind: "message.email.send", estimate: 500000,
		status: 200, decision: "DENY", reason: "BUDGET_EXCEEDED", blockedByScope: true, event: "reservation.observed_denied"},
	{id: "observe_mode_allow", tenantObserves: true, kind: "llm.completion", estimate: 3000, status: 200,
		decision: "ALLOW", event: "reservation.observed_allowed"},
	{id: "threshold_crossing", policy: `"action_quotas":[{"action_kind":"message.email.send","max_calls":10,"window":"per_run","threshold_pct":0.8}]`,
		counted: 7, kind: "message.email.send", estimate: 500, status: 200,
		decision: "ALLOW", moves: true},
	{id: "per_request_observe_override", kind: "llm.completion", estimate: 2000, observe: "OBSERVE", status: 200,
		decision: "ALLOW", event: "reservation.observed_allowed"},
	// Ours: observe wins over dry_run's silence, and still emits.
	{id: "observe_with_dry_run", kind: "llm.completion", estimate: 2000, observe: "OBSERVE", dryRun: true, status: 200,
		decision: "ALLOW", event: "reservation.observed_allowed"},
	// Ours: a request's ENFORCE beats its tenant's OBSERVE.
	{id: "request_enforce_beats_tenant", tenantObserves: true, kind: "llm.completion", estimate: 2000, observe: "ENFORCE",
		status: 200, decision: "ALLOW", moves: true},
	{id: "deny_burst_per_minute", policy: `"action_quotas":[{"action_kind":"message.email.send","max_calls":5,"window":"per_minute_tumbling"},` +
		`{"action_kind":"message.email.send","max_calls":100,"window":"per_hour_tumbling"}]`, counted: 5, kind: "message.email.send", estimate: 500, status: 409,
		code: "ACTION_QUOTA_EXCEEDED", reason: "ACTION_QUOTA_EXCEEDED", blockedByPolicy: "pol_burst_protection", quotaViolation: true},
	{id: "deny_agent_spawn_quota", policy: `"action_quotas":[{"action_kind":"agent.spawn","max_calls":5,"window":"per_run"}]`,
		counted: 5, kind: "agent.spawn", estimate: 100000, status: 409,
		code: "ACTION_QUOTA_EXCEEDED", reason: "ACTION_QUOTA_EXCEEDED", blockedByPolicy: "pol_agent_safety", quotaViolation: true},
}

// v026Fixture is one case's tenant, key and budgets, built through the admin API.
type v026Fixture struct {
	tenant, secret, agentScope string
}

func (e *env) v026Fixture(t *testing.T, observes bool) v026Fixture {
	t.Helper()
	as := []string{"X-Admin-API-Key", adminKey}
	tenant := strings.ReplaceAll(ledgertest.NewTenantID(t), "_", "-")
	e.call("POST", "/v1/admin/tenants", "", `{"tenant_id":"`+tenant+`","name":"acme"}`, as...).must(t, 201, "tenant")
	k := e.call("POST", "/v1/admin/api-keys", "", `{"tenant_id":"`+tenant+`","name":"agent","permissions":["reservations:create","reservations:commit","reservations:release","reservations:extend","reservations:list","balances:read","events:read"]}`, as...).must(t, 201, "key")
	agent := "tenant:" + tenant + "/agent:support-bot"
	for scope, amount := range map[string]string{"tenant:" + tenant: "1000000", agent: "50000"} {
		e.call("POST", "/v1/admin/budgets", "", `{"scope":"`+scope+`","unit":"USD_MICROCENTS",`+
			`"allocated":{"unit":"USD_MICROCENTS","amount":`+amount+`}}`, as...).must(t, 201, "budget "+scope)
	}
	if observes {
		tn := e.call("PATCH", "/v1/admin/tenants/"+tenant, "", `{"observe_mode":"OBSERVE"}`, as...).must(t, 200, "observe")
		if tn["observe_mode"] != "OBSERVE" {
			t.Fatalf("tenant after PATCH: %v", tn)
		}
	}
	return v026Fixture{tenant: tenant, secret: k["key_secret"].(string), agentScope: agent}
}

func (c v026Case) body(key string) string {
	action := `{"kind":"` + c.kind + `","name":"` + c.id + `"`
	if c.policyKeys != "" {
		action += `,"policy_keys":` + c.policyKeys
	}
	b := `{"idempotency_key":"` + key + `","subject":{"agent":"support-bot","dimensions":{"run_id":"run-abc-123"}},` +
		`"action":` + action + `},"estimate":{"unit":"USD_MICROCENTS","amount":` + strconv.FormatInt(c.estimate, 10) + `}`
	if c.dryRun {
		b += `,"dry_run":true`
	}
	if c.observe != "" {
		b += `,"observe_mode":"` + c.observe + `"`
	}
	return b + `}`
}

// The acceptance vectors over HTTP and over gRPC: status, decision, error
// code, deny_detail (reason_code, blocked_by_policy, quota_violation,
// blocked_by_scope), the reservation event appended, and that nothing but a
// live ALLOW moves a budget.
func TestV026Vectors(t *testing.T) {
	e := startFull(t)
	for _, wire := range []string{"http", "grpc"} {
		for _, c := range v026Cases {
			t.Run(wire+"/"+c.id, func(t *testing.T) {
				// A calendar window may turn between building the counter
				// state and the request: then the case runs again once.
				var f v026Fixture
				var got v026Answer
				var before ledgertest.State
				for try := 0; ; try++ {
					window := time.Now().UTC().Format("2006-01-02T15:04")
					f = e.v026Fixture(t, c.tenantObserves)
					e.v026State(t, f, &c)
					before = ledgertest.ReadBudget(t, e.c, f.tenant, f.agentScope, "USD_MICROCENTS")
					if wire == "http" {
						got = e.v026HTTP(t, f, c)
					} else {
						got = e.v026GRPC(t, f, c)
					}
					if try > 0 || time.Now().UTC().Format("2006-01-02T15:04") == window {
						break
					}
				}
				c.check(t, f, got)
				after := ledgertest.ReadBudget(t, e.c, f.tenant, f.agentScope, "USD_MICROCENTS")
				if moved := fmt.Sprint(after) != fmt.Sprint(before); moved != c.moves {
					t.Fatalf("agent budget moved %v, want %v: %+v -> %+v", moved, c.moves, before, after)
				}
				e.checkEvent(t, f, c)
			})
		}
	}
}

// v026State builds a case's policy and counter state through the admin and
// runtime APIs, and names the policy's id in the expected blocked_by_policy.
func (e *env) v026State(t *testing.T, f v026Fixture, c *v026Case) {
	t.Helper()
	if c.policy == "" {
		return
	}
	as := []string{"X-Admin-API-Key", adminKey}
	r := e.call("POST", "/v1/admin/policies", "", `{"tenant_id":"`+f.tenant+`","name":"`+c.id+`",`+
		`"scope_pattern":"tenant:`+f.tenant+`/agent:*",`+c.policy+`}`, as...)
	if r.status != 201 {
		t.Fatalf("policy: %d %s", r.status, r.body)
	}
	id, _ := r.obj(t)["policy_id"].(string)
	if c.blockedByPolicy != "" {
		c.blockedByPolicy = id
	}
	for i := range c.counted {
		// ENFORCE: counted even where the tenant observes.
		body := `{"idempotency_key":"pre-` + strconv.Itoa(i) + `","subject":{"agent":"support-bot","dimensions":{"run_id":"run-abc-123"}},` +
			`"action":{"kind":"` + c.kind + `","name":"before"},"estimate":{"unit":"USD_MICROCENTS","amount":100},"observe_mode":"ENFORCE"}`
		if r := e.call("POST", "/v1/reservations", "", body, "X-Cycles-API-Key", f.secret); r.status != 200 || r.obj(t)["decision"] != "ALLOW" {
			t.Fatalf("counter state, call %d: %d %s", i, r.status, r.body)
		}
	}
}

// v026Answer is what either wire answered, in common terms.
type v026Answer struct {
	status   int
	decision string
	code     string
	rid      string
	dd       *actionkind.DenyDetailJSON
}

func (e *env) v026HTTP(t *testing.T, f v026Fixture, c v026Case) v026Answer {
	r := e.call("POST", "/v1/reservations", "", c.body("k-"+c.id), "X-Cycles-API-Key", f.secret)
	m := r.obj(t)
	a := v026Answer{status: r.status}
	var ddRaw any
	if r.status == 200 {
		a.decision, _ = m["decision"].(string)
		a.rid, _ = m["reservation_id"].(string)
		ddRaw = m["deny_detail"]
		if c.observe == "" && c.policyKeys == "" && !c.tenantObserves && ddRaw != nil {
			t.Fatalf("a v0.1.25-shaped request got deny_detail on a success body: %s", r.body)
		}
	} else {
		a.code, _ = m["error"].(string)
		if d, ok := m["details"].(map[string]any); ok {
			ddRaw = d["deny_detail"]
		}
	}
	if ddRaw != nil {
		raw, _ := json.Marshal(ddRaw)
		a.dd = &actionkind.DenyDetailJSON{}
		if err := json.Unmarshal(raw, a.dd); err != nil {
			t.Fatalf("deny_detail %s: %v", raw, err)
		}
	}
	return a
}

func (e *env) v026GRPC(t *testing.T, f v026Fixture, c v026Case) v026Answer {
	var req cyclesv1.CreateReservationRequest
	req.IdempotencyKey = "g-" + c.id
	req.Subject = &cyclesv1.Subject{Agent: "support-bot", Dimensions: map[string]string{"run_id": "run-abc-123"}}
	req.Action = &cyclesv1.Action{Kind: c.kind, Name: c.id}
	if c.policyKeys != "" {
		var pk struct {
			Host            string `json:"host"`
			RecipientDomain string `json:"recipient_domain"`
		}
		_ = json.Unmarshal([]byte(c.policyKeys), &pk)
		req.Action.PolicyKeys = &cyclesv1.ActionPolicyKeys{Host: pk.Host, RecipientDomain: pk.RecipientDomain}
	}
	req.Estimate = &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_USD_MICROCENTS, Amount: c.estimate}
	req.DryRun = c.dryRun
	if c.observe != "" {
		req.ObserveMode, _ = actionkind.ParseObserveMode(c.observe)
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-cycles-api-key", f.secret)
	resp, err := e.grpc.CreateReservation(ctx, &req)
	if err != nil {
		code, md, ok := apierr.FromStatus(err)
		if !ok || status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("reserve: %v", err)
		}
		a := v026Answer{status: 409, code: string(code)}
		if s := md[actionkind.MetadataKey]; s != "" {
			d, perr := actionkind.ParseDenyDetail(s)
			if perr != nil {
				t.Fatalf("ErrorInfo deny_detail %q: %v", s, perr)
			}
			a.dd = actionkind.WireDenyDetail(d)
		}
		return a
	}
	a := v026Answer{status: 200, decision: strings.TrimPrefix(resp.GetDecision().String(), "DECISION_"),
		rid: resp.GetReservationId(), dd: actionkind.WireDenyDetail(resp.GetDenyDetail())}
	if observed := c.observe == "OBSERVE" || (c.tenantObserves && c.observe == ""); resp.GetObserved() != observed {
		t.Fatalf("observed %v, want %v", resp.GetObserved(), observed)
	}
	return a
}

func (c v026Case) check(t *testing.T, f v026Fixture, a v026Answer) {
	t.Helper()
	if a.status != c.status || a.decision != c.decision || a.code != c.code {
		t.Fatalf("status %d decision %q code %q, want %d %q %q", a.status, a.decision, a.code, c.status, c.decision, c.code)
	}
	// A live ALLOW holds (reservation_id); dry runs and observed requests never do.
	if (a.rid != "") != c.moves {
		t.Fatalf("reservation_id %q with moves=%v", a.rid, c.moves)
	}
	if c.reason == "" {
		if a.dd != nil {
			t.Fatalf("unexpected deny_detail %+v", a.dd)
		}
		return
	}
	if a.dd == nil || a.dd.ReasonCode != c.reason || a.dd.BlockedByPolicy != c.blockedByPolicy ||
		(a.dd.QuotaViolation != nil) != c.quotaViolation {
		t.Fatalf("deny_detail %+v, want reason %s policy %q quota %v", a.dd, c.reason, c.blockedByPolicy, c.quotaViolation)
	}
	if c.blockedByScope && (a.dd.BlockedByScope != f.agentScope || a.dd.BudgetRemaining == nil ||
		*a.dd.BudgetRemaining != 50000 || a.dd.SuggestedFix == "") {
		t.Fatalf("deny_detail %+v: want blocked_by_scope %s, budget_remaining 50000, a suggested fix", a.dd, f.agentScope)
	}
}

// checkEvent: the case appended exactly its reservation event (or none).
func (e *env) checkEvent(t *testing.T, f v026Fixture, c v026Case) {
	t.Helper()
	r := e.call("GET", "/v1/events?category=reservation", "", "", "X-Cycles-API-Key", f.secret)
	if r.status != 200 {
		t.Fatalf("events: %d %s", r.status, r.body)
	}
	var page struct {
		Events []struct {
			EventType string         `json:"event_type"`
			Data      map[string]any `json:"data"`
		} `json:"events"`
	}
	if err := json.Unmarshal(r.body, &page); err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, ev := range page.Events {
		types = append(types, ev.EventType)
	}
	want := []string{}
	if c.event != "" {
		want = append(want, c.event)
	}
	if strings.Join(types, ",") != strings.Join(want, ",") {
		t.Fatalf("reservation events %v, want %v", types, want)
	}
	if c.event == "" {
		return
	}
	d := page.Events[0].Data
	if d["observe_mode"] != nil && d["observe_mode"] != "OBSERVE" {
		t.Fatalf("event data %v", d)
	}
	if c.event == "reservation.observed_denied" {
		dd, _ := d["deny_detail"].(map[string]any)
		if dd["reason_code"] != c.reason || d["would_have_blocked_at"] != dd["blocked_by_scope"] {
			t.Fatalf("observed_denied data %v", d)
		}
	}
	if c.event == "reservation.observed_allowed" && d["decision"] != c.decision {
		t.Fatalf("observed_allowed data %v", d)
	}
}
