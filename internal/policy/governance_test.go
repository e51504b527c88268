package policy_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/actionkind"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/policy"
	"github.com/cyclesgo/cycles-go/internal/sweeper"
	"github.com/cyclesgo/cycles-go/internal/validate"
	"github.com/cyclesgo/cycles-go/test/errtest"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
	"github.com/cyclesgo/cycles-go/test/redistest"
	"github.com/cyclesgo/cycles-go/test/scripttest"
)

const (
	perRun  = cyclesv1.ActionQuotaWindow_ACTION_QUOTA_WINDOW_PER_RUN
	perHour = cyclesv1.ActionQuotaWindow_ACTION_QUOTA_WINDOW_PER_HOUR_TUMBLING
	perDay  = cyclesv1.ActionQuotaWindow_ACTION_QUOTA_WINDOW_PER_DAY_TUMBLING
	perTDay = cyclesv1.ActionQuotaWindow_ACTION_QUOTA_WINDOW_PER_TENANT_PER_DAY
	extSide = cyclesv1.ActionRiskClass_ACTION_RISK_CLASS_EXTERNAL_SIDE_EFFECT
	email   = "message.email.send"
)

// oneHour starts a scenario that counts in hourly or daily quota windows
// (UTC; a day ends on an hour boundary) at least 30 s before the hour ends
// (ledgertest.ClearOfBoundary), so its counts and refusals all fall in one
// window instance.
func (e *env) oneHour() {
	e.t.Helper()
	ledgertest.ClearOfBoundary(e.t, e.rdb, time.Hour, 30*time.Second)
}

func aq(kind string, max int64, w cyclesv1.ActionQuotaWindow) *cyclesv1.ActionQuota {
	return &cyclesv1.ActionQuota{ActionKind: kind, MaxCalls: max, Window: w}
}

// call of kind by subj (run "run-1"), estimate 10 TOKENS; mode "live", "dry"
// or "observe". Returns the decision ("ALLOW", "DENY") or the refusal code,
// and the deny detail.
func (e *env) try(subj *cyclesv1.Subject, kind, mode string, mut ...func(*cyclesv1.CreateReservationRequest)) (string, *cyclesv1.DenyDetail, string) {
	e.t.Helper()
	n++
	s := proto.Clone(subj).(*cyclesv1.Subject)
	if s.Dimensions == nil {
		s.Dimensions = map[string]string{"run_id": "run-1"}
	}
	req := &cyclesv1.CreateReservationRequest{IdempotencyKey: fmt.Sprintf("g-%d", n), Subject: s,
		Action: &cyclesv1.Action{Kind: kind, Name: "m"}, Estimate: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 10},
		DryRun: mode == "dry"}
	if mode == "observe" {
		req.ObserveMode = cyclesv1.ObserveMode_OBSERVE_MODE_OBSERVE
	}
	for _, f := range mut {
		f(req)
	}
	resp, err := call(e.ctx, func(ctx context.Context, r *cyclesv1.CreateReservationRequest) (*cyclesv1.CreateReservationResponse, error) {
		return e.led.Reserve(ctx, e.tenant, r)
	}, req)
	if err != nil {
		ae, ok := apierr.As(err)
		if !ok {
			e.t.Fatalf("reserve: %v", err)
		}
		var dd *cyclesv1.DenyDetail
		if s := ae.Details[actionkind.MetadataKey]; s != "" {
			if dd, err = actionkind.ParseDenyDetail(s); err != nil {
				e.t.Fatal(err)
			}
		}
		return string(ae.Code), dd, ae.Details["field"]
	}
	return strings.TrimPrefix(resp.GetDecision().String(), "DECISION_"), resp.GetDenyDetail(), resp.GetReservationId()
}

// counters is every live quota counter of the tenant, from the operator
// listing: "<scope>|<kind or __risk__:<class>>|<window>|<window key>" ->
// calls counted.
func (e *env) counters() map[string]string {
	e.t.Helper()
	out := map[string]string{}
	for cur := ""; ; {
		page, err := e.pol.ListActionQuotaCounters(e.ctx, &cyclesv1.ListActionQuotaCountersRequest{TenantId: e.tenant,
			IncludeZero: true, Limit: 200, Cursor: cur})
		if err != nil {
			e.t.Fatal(err)
		}
		for _, c := range page.GetCounters() {
			counted := c.GetActionKind()
			if counted == actionkind.RiskCounter {
				counted += ":" + string(actionkind.RiskOf(c.GetRiskClass()))
			}
			out[c.GetScope()+"|"+counted+"|"+actionkind.WindowName(c.GetWindow())+"|"+c.GetWindowKey()] = fmt.Sprint(c.GetUsed())
		}
		if !page.GetHasMore() {
			return out
		}
		cur = page.GetNextCursor()
	}
}

// TestGovernanceCRUD: the v0.1.26 fields on create, get and update
// (replace, clear, mutual exclusivity), and the refusals, each naming its field.
func TestGovernanceCRUD(t *testing.T) {
	e := newEnv(t)
	kinds, err := actionkind.New([]actionkind.Kind{{Name: "custom.acme.erp.post", Risk: actionkind.SideEffect}})
	if err != nil {
		t.Fatal(err)
	}
	exec := scripttest.On(t, e.rdb)
	e.pol = policy.New(exec, policy.Options{Kinds: kinds})
	p := e.create(&cyclesv1.CreateScopePolicyRequest{ScopePattern: "*", DeniedActionKinds: []string{"payment.charge", "custom.acme.erp.post"},
		ActionQuotas: []*cyclesv1.ActionQuota{{ActionKind: email, MaxCalls: 5, Window: perRun, PerRunCounterTtlMs: 120_000,
			ThresholdPct: 0.5, HostAllowlist: []string{"smtp.example.com"}}},
		RiskClassQuotas: []*cyclesv1.RiskClassQuota{{RiskClass: extSide, MaxCalls: 50, Window: perHour}}})
	got := must(t, e.pol.GetScopePolicy, e.ctx, &cyclesv1.GetScopePolicyRequest{TenantId: e.tenant, PolicyId: p.GetPolicyId()}).GetPolicy()
	want := &cyclesv1.ScopePolicy{AllowedActionKinds: []string{}, DeniedActionKinds: []string{"payment.charge", "custom.acme.erp.post"},
		ActionQuotas: []*cyclesv1.ActionQuota{{ActionKind: email, MaxCalls: 5, Window: perRun, PerRunCounterTtlMs: 120_000,
			ThresholdPct: 0.5, HostAllowlist: []string{"smtp.example.com"}}},
		RiskClassQuotas: []*cyclesv1.RiskClassQuota{{RiskClass: extSide, MaxCalls: 50, Window: perHour, ThresholdPct: 0.8}}}
	gov := func(p *cyclesv1.ScopePolicy) *cyclesv1.ScopePolicy {
		return &cyclesv1.ScopePolicy{AllowedActionKinds: p.GetAllowedActionKinds(), DeniedActionKinds: p.GetDeniedActionKinds(),
			ActionQuotas: p.GetActionQuotas(), RiskClassQuotas: p.GetRiskClassQuotas()}
	}
	if !proto.Equal(gov(got), want) {
		t.Fatalf("stored %v\nwant %v", gov(got), want)
	}
	upd := func(r *cyclesv1.UpdateScopePolicyRequest) (*cyclesv1.UpdateScopePolicyResponse, error) {
		r.TenantId, r.PolicyId = e.tenant, p.GetPolicyId()
		return call(e.ctx, e.pol.UpdateScopePolicy, r)
	}
	// Allowlist while the denylist stays: refused on the result.
	_, err = upd(&cyclesv1.UpdateScopePolicyRequest{AllowedActionKinds: &cyclesv1.ActionKindList{Kinds: []string{"llm.completion"}}})
	wantField(t, err, "allowed_action_kinds")
	// Clearing the denylist and setting the allowlist in one request is fine;
	// an empty quota list clears, an absent one stays.
	r, err := upd(&cyclesv1.UpdateScopePolicyRequest{AllowedActionKinds: &cyclesv1.ActionKindList{Kinds: []string{"llm.completion"}},
		DeniedActionKinds: &cyclesv1.ActionKindList{}, RiskClassQuotas: &cyclesv1.RiskClassQuotaList{}})
	if err != nil {
		t.Fatal(err)
	}
	want = &cyclesv1.ScopePolicy{AllowedActionKinds: []string{"llm.completion"}, DeniedActionKinds: []string{},
		ActionQuotas: want.GetActionQuotas(), RiskClassQuotas: []*cyclesv1.RiskClassQuota{}}
	if !proto.Equal(gov(r.GetPolicy()), want) {
		t.Fatalf("after update %v\nwant %v", gov(r.GetPolicy()), want)
	}

	type cpr = cyclesv1.CreateScopePolicyRequest
	refusals := []struct {
		name, field string
		req         *cpr
	}{
		{"both lists", "denied_action_kinds", &cpr{AllowedActionKinds: []string{"a.b"}, DeniedActionKinds: []string{"c.d"}}},
		{"wildcard kind", "allowed_action_kinds[0]", &cpr{AllowedActionKinds: []string{"llm.*"}}},
		{"duplicate kind", "denied_action_kinds[1]", &cpr{DeniedActionKinds: []string{"a.b", "a.b"}}},
		{"kind too long", "denied_action_kinds[0]", &cpr{DeniedActionKinds: []string{strings.Repeat("k", 65)}}},
		{"undeclared custom kind", "denied_action_kinds[0]", &cpr{DeniedActionKinds: []string{"custom.acme.other"}}},
		{"undeclared custom quota", "action_quotas[0].action_kind", &cpr{ActionQuotas: []*cyclesv1.ActionQuota{aq("custom.x.y", 1, perRun)}}},
		{"no window", "action_quotas[0].window", &cpr{ActionQuotas: []*cyclesv1.ActionQuota{aq(email, 1, 0)}}},
		{"max_calls 0", "action_quotas[0].max_calls", &cpr{ActionQuotas: []*cyclesv1.ActionQuota{aq(email, 0, perRun)}}},
		{"max_calls too big", "action_quotas[0].max_calls", &cpr{ActionQuotas: []*cyclesv1.ActionQuota{aq(email, 100_001, perRun)}}},
		{"run ttl on a calendar window", "action_quotas[0].per_run_counter_ttl_ms",
			&cpr{ActionQuotas: []*cyclesv1.ActionQuota{{ActionKind: email, MaxCalls: 1, Window: perHour, PerRunCounterTtlMs: 60_000}}}},
		{"run ttl too short", "action_quotas[0].per_run_counter_ttl_ms",
			&cpr{ActionQuotas: []*cyclesv1.ActionQuota{{ActionKind: email, MaxCalls: 1, Window: perRun, PerRunCounterTtlMs: 59_999}}}},
		{"threshold 1", "action_quotas[0].threshold_pct",
			&cpr{ActionQuotas: []*cyclesv1.ActionQuota{{ActionKind: email, MaxCalls: 1, Window: perRun, ThresholdPct: 1}}}},
		{"no risk class", "risk_class_quotas[0].risk_class", &cpr{RiskClassQuotas: []*cyclesv1.RiskClassQuota{{MaxCalls: 1, Window: perRun}}}},
		{"51 quotas", "action_quotas", &cpr{ActionQuotas: func() (l []*cyclesv1.ActionQuota) {
			for range 51 {
				l = append(l, aq(email, 1, perRun))
			}
			return l
		}()}},
	}
	for _, c := range refusals {
		t.Run(c.name, func(t *testing.T) {
			c.req.TenantId, c.req.Name, c.req.ScopePattern = e.tenant, "r-"+c.name, "*"
			_, err := call(e.ctx, e.pol.CreateScopePolicy, c.req)
			wantField(t, err, c.field)
		})
	}
}

func wantField(t *testing.T, err error, field string) {
	t.Helper()
	ae, ok := apierr.As(err)
	if !ok || ae.Code != apierr.InvalidRequest || ae.Details["field"] != field {
		t.Fatalf("err = %v, want INVALID_REQUEST on %s", err, field)
	}
}

// TestGovernanceEvaluationOrder: access lists, then risk-class quotas, then
// per-kind quotas, then budgets; only a live ALLOW counts (docs/protocol.md#v0126-action-governance).
func TestGovernanceEvaluationOrder(t *testing.T) {
	huge := func(r *cyclesv1.CreateReservationRequest) { r.Estimate.Amount = 10_000_000 } // over every budget
	host := func(h string) func(*cyclesv1.CreateReservationRequest) {
		return func(r *cyclesv1.CreateReservationRequest) { r.Action.PolicyKeys = &cyclesv1.ActionPolicyKeys{Host: h} }
	}
	type step struct {
		subj   *cyclesv1.Subject
		kind   string
		mode   string
		mut    []func(*cyclesv1.CreateReservationRequest)
		want   string // decision or refusal code
		reason string // deny_detail.reason_code ("" = none)
		risk   bool   // quota_violation.risk_class set
		field  string // INVALID_REQUEST field
	}
	type pol = cyclesv1.CreateScopePolicyRequest
	cases := []struct {
		name     string
		policies []*pol
		steps    []step
		counters map[string]string // after the steps; keys relative to "q:" with T for the tenant
	}{
		{name: "denylist before budget", policies: []*pol{{ScopePattern: "*", DeniedActionKinds: []string{"payment.charge"}}},
			steps: []step{
				{bot, "payment.charge", "live", []func(*cyclesv1.CreateReservationRequest){huge}, "ACTION_KIND_DENIED", "ACTION_KIND_DENIED", false, ""},
				{bot, "payment.charge", "dry", nil, "DENY", "ACTION_KIND_DENIED", false, ""},
				{bot, "llm.completion", "live", nil, "ALLOW", "", false, ""},
			}},
		{name: "allowlist", policies: []*pol{{ScopePattern: "*", AllowedActionKinds: []string{"llm.completion"}}},
			steps: []step{
				{bot, email, "live", nil, "ACTION_KIND_NOT_ALLOWED", "ACTION_KIND_NOT_ALLOWED", false, ""},
				{bot, email, "observe", nil, "DENY", "ACTION_KIND_NOT_ALLOWED", false, ""},
				{bot, "llm.completion", "live", nil, "ALLOW", "", false, ""},
			}},
		{name: "the highest-priority policy with lists decides alone",
			policies: []*pol{{ScopePattern: "*", Priority: 1, DeniedActionKinds: []string{email}},
				{ScopePattern: "agent:bot", Priority: 5, AllowedActionKinds: []string{email}}},
			steps: []step{{bot, email, "live", nil, "ALLOW", "", false, ""}, {prod, email, "live", nil, "ACTION_KIND_DENIED", "ACTION_KIND_DENIED", false, ""}}},
		{name: "quota before budget; budget and dry runs do not count",
			policies: []*pol{{ScopePattern: "*", ActionQuotas: []*cyclesv1.ActionQuota{aq(email, 2, perRun)}}},
			steps: []step{
				{bot, email, "live", []func(*cyclesv1.CreateReservationRequest){huge}, "BUDGET_EXCEEDED", "BUDGET_EXCEEDED", false, ""},
				{bot, email, "dry", nil, "ALLOW", "", false, ""},
				{bot, email, "observe", nil, "ALLOW", "", false, ""},
				{bot, email, "live", nil, "ALLOW", "", false, ""},
				{bot, email, "live", nil, "ALLOW", "", false, ""},
				{bot, email, "live", []func(*cyclesv1.CreateReservationRequest){huge}, "ACTION_QUOTA_EXCEEDED", "ACTION_QUOTA_EXCEEDED", false, ""},
				{bot, email, "dry", nil, "DENY", "ACTION_QUOTA_EXCEEDED", false, ""},
				{prod, email, "live", nil, "ALLOW", "", false, ""}, // another scope, another counter
			},
			counters: map[string]string{"tenant:T/workspace:prod/agent:bot|" + email + "|per_run|run-1": "2",
				"tenant:T/workspace:prod|" + email + "|per_run|run-1": "1"}},
		{name: "risk class before kind", policies: []*pol{{ScopePattern: "*",
			ActionQuotas:    []*cyclesv1.ActionQuota{aq(email, 1, perDay)},
			RiskClassQuotas: []*cyclesv1.RiskClassQuota{{RiskClass: extSide, MaxCalls: 1, Window: perDay}}}},
			steps: []step{
				{bot, email, "live", nil, "ALLOW", "", false, ""},
				{bot, email, "live", nil, "ACTION_QUOTA_EXCEEDED", "ACTION_QUOTA_EXCEEDED", true, ""},
				{bot, "message.slack.post", "live", nil, "ACTION_QUOTA_EXCEEDED", "ACTION_QUOTA_EXCEEDED", true, ""},
				{bot, "llm.completion", "live", nil, "ALLOW", "", false, ""},
			}},
		{name: "per_tenant_per_day counts at the tenant", policies: []*pol{{ScopePattern: "*",
			ActionQuotas: []*cyclesv1.ActionQuota{aq(email, 2, perTDay)}}},
			steps: []step{
				{bot, email, "live", nil, "ALLOW", "", false, ""},
				{prod, email, "live", nil, "ALLOW", "", false, ""},
				{&cyclesv1.Subject{Workspace: "dev"}, email, "live", nil, "ACTION_QUOTA_EXCEEDED", "ACTION_QUOTA_EXCEEDED", false, ""},
			}},
		{name: "policy_keys allowlists filter", policies: []*pol{{ScopePattern: "*", ActionQuotas: []*cyclesv1.ActionQuota{
			{ActionKind: email, MaxCalls: 1, Window: perRun, HostAllowlist: []string{"smtp.a.com"}}}}},
			steps: []step{
				{bot, email, "live", []func(*cyclesv1.CreateReservationRequest){host("smtp.a.com")}, "ALLOW", "", false, ""},
				{bot, email, "live", nil, "ALLOW", "", false, ""},                                                            // absent key: rule skipped
				{bot, email, "live", []func(*cyclesv1.CreateReservationRequest){host("smtp.b.com")}, "ALLOW", "", false, ""}, // not listed
				{bot, email, "live", []func(*cyclesv1.CreateReservationRequest){host("smtp.a.com")}, "ACTION_QUOTA_EXCEEDED", "ACTION_QUOTA_EXCEEDED", false, ""},
			}},
		{name: "policy_keys the kind does not declare are ignored", policies: []*pol{{ScopePattern: "*", ActionQuotas: []*cyclesv1.ActionQuota{
			{ActionKind: "message.sms.send", MaxCalls: 1, Window: perRun, HostAllowlist: []string{"smtp.a.com"}},
			{ActionKind: "acme.unlisted", MaxCalls: 1, Window: perRun, HostAllowlist: []string{"smtp.a.com"}}}}},
			steps: []step{
				// message.sms.send declares recipient_domain only: its host is
				// not matched, so the host-filtered rule never applies.
				{bot, "message.sms.send", "live", []func(*cyclesv1.CreateReservationRequest){host("smtp.a.com")}, "ALLOW", "", false, ""},
				{bot, "message.sms.send", "live", []func(*cyclesv1.CreateReservationRequest){host("smtp.a.com")}, "ALLOW", "", false, ""},
				// An unregistered kind has no spec: every provided key matches.
				{bot, "acme.unlisted", "live", []func(*cyclesv1.CreateReservationRequest){host("smtp.a.com")}, "ALLOW", "", false, ""},
				{bot, "acme.unlisted", "live", []func(*cyclesv1.CreateReservationRequest){host("smtp.a.com")}, "ACTION_QUOTA_EXCEEDED", "ACTION_QUOTA_EXCEEDED", false, ""},
			}},
		{name: "per_run needs a run_id", policies: []*pol{{ScopePattern: "*", ActionQuotas: []*cyclesv1.ActionQuota{aq(email, 5, perRun)}}},
			steps: []step{
				{bot, email, "dry", []func(*cyclesv1.CreateReservationRequest){func(r *cyclesv1.CreateReservationRequest) { r.Subject.Dimensions = nil }},
					"INVALID_REQUEST", "", false, "subject.dimensions.run_id"},
				{bot, "llm.completion", "live", []func(*cyclesv1.CreateReservationRequest){func(r *cyclesv1.CreateReservationRequest) { r.Subject.Dimensions = nil }},
					"ALLOW", "", false, ""}, // no quota for this kind
			}},
		{name: "undeclared custom kind under governance", policies: []*pol{{ScopePattern: "agent:*", DeniedActionKinds: []string{"payment.charge"}}},
			steps: []step{
				{bot, "custom.acme.undeclared", "live", nil, "INVALID_REQUEST", "", false, "action.kind"},
				{prod, "custom.acme.undeclared", "live", nil, "ALLOW", "", false, ""}, // no governance applies
			}},
		{name: "higher priority quota for a kind shadows a lower one", policies: []*pol{
			{ScopePattern: "*", Priority: 1, ActionQuotas: []*cyclesv1.ActionQuota{aq(email, 1, perRun)}},
			{ScopePattern: "agent:*", Priority: 9, ActionQuotas: []*cyclesv1.ActionQuota{aq(email, 3, perRun)}}},
			steps: []step{
				{bot, email, "live", nil, "ALLOW", "", false, ""},
				{bot, email, "live", nil, "ALLOW", "", false, ""},
				{bot, email, "live", nil, "ALLOW", "", false, ""},
				{bot, email, "live", nil, "ACTION_QUOTA_EXCEEDED", "ACTION_QUOTA_EXCEEDED", false, ""},
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			e.oneHour()
			ids := map[string]bool{}
			for i, p := range c.policies {
				p.Name = fmt.Sprintf("p%d", i)
				ids[e.create(p).GetPolicyId()] = true
			}
			for i, s := range c.steps {
				got, dd, extra := e.try(s.subj, s.kind, s.mode, s.mut...)
				if got != s.want || (dd == nil) != (s.reason == "") || (dd != nil && dd.GetReasonCode() != s.reason) {
					t.Fatalf("step %d (%s %s): %s %v, want %s %s", i, s.mode, s.kind, got, dd, s.want, s.reason)
				}
				if s.field != "" && extra != s.field {
					t.Fatalf("step %d: field %q, want %q", i, extra, s.field)
				}
				if strings.HasPrefix(s.reason, "ACTION_") && !ids[dd.GetBlockedByPolicy()] {
					t.Fatalf("step %d: blocked_by_policy %q is none of %v", i, dd.GetBlockedByPolicy(), ids)
				}
				if s.reason == "ACTION_QUOTA_EXCEEDED" {
					q := dd.GetQuotaViolation()
					if q.GetActionKind() != s.kind || q.GetUsed() < q.GetLimit() || (q.GetRiskClass() != 0) != s.risk || q.GetWindowKey() == "" {
						t.Fatalf("step %d: quota_violation %v", i, q)
					}
				}
			}
			if c.counters != nil {
				want := map[string]string{}
				for k, v := range c.counters {
					want[strings.ReplaceAll(k, "tenant:T", "tenant:"+e.tenant)] = v
				}
				if got := e.counters(); fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("counters %v, want %v", got, want)
				}
			}
		})
	}
}

// TestDecideNeverCounts: decide applies the same rules and counts nothing.
func TestDecideNeverCounts(t *testing.T) {
	e := newEnv(t)
	e.create(&cyclesv1.CreateScopePolicyRequest{ScopePattern: "*", ActionQuotas: []*cyclesv1.ActionQuota{aq(email, 1, perRun)}})
	decide := func() *cyclesv1.DecideResponse {
		n++
		req := &cyclesv1.DecideRequest{IdempotencyKey: fmt.Sprintf("d-%d", n),
			Subject: &cyclesv1.Subject{Workspace: "prod", Agent: "bot", Dimensions: map[string]string{"run_id": "run-1"}},
			Action:  &cyclesv1.Action{Kind: email, Name: "m"}, Estimate: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 10}}
		return must(t, func(ctx context.Context, r *cyclesv1.DecideRequest) (*cyclesv1.DecideResponse, error) {
			return e.led.Decide(ctx, e.tenant, r)
		}, e.ctx, req)
	}
	for range 3 {
		if d := decide(); d.GetDecision() != cyclesv1.Decision_DECISION_ALLOW {
			t.Fatalf("decide: %v", d)
		}
	}
	if got, _, _ := e.try(bot, email, "live"); got != "ALLOW" {
		t.Fatalf("reserve after decides: %s", got)
	}
	if d := decide(); d.GetDecision() != cyclesv1.Decision_DECISION_DENY || d.GetDenyDetail().GetReasonCode() != "ACTION_QUOTA_EXCEEDED" {
		t.Fatalf("decide at the quota: %v", d)
	}
}

// TestQuotaGiveBack: per_run counts are given back on release and expiry,
// never on commit; calendar windows are never given back.
func TestQuotaGiveBack(t *testing.T) {
	for _, c := range []struct {
		name    string
		w       cyclesv1.ActionQuotaWindow
		settle  string // release, commit, expire
		refunds bool
	}{
		{"per_run release", perRun, "release", true},
		{"per_run expiry", perRun, "expire", true},
		{"per_run commit", perRun, "commit", false},
		{"per_hour release", perHour, "release", false},
		{"per_day expiry", perDay, "expire", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			e.oneHour()
			e.create(&cyclesv1.CreateScopePolicyRequest{ScopePattern: "*", ActionQuotas: []*cyclesv1.ActionQuota{aq(email, 1, c.w)}})
			// Only the expiry case holds for 1 s: a release or commit a
			// loaded machine delays past a 1 s TTL would meet an expired
			// reservation (the tenant's default TTL is 60 s).
			ttl := func(r *cyclesv1.CreateReservationRequest) {
				if c.settle == "expire" {
					r.TtlMs, r.GracePeriodMs = proto.Int64(1000), proto.Int64(0)
				}
			}
			got, _, rid := e.try(bot, email, "live", ttl)
			if got != "ALLOW" {
				t.Fatalf("first call: %s", got)
			}
			switch c.settle {
			case "release":
				must(t, func(ctx context.Context, r *cyclesv1.ReleaseReservationRequest) (*cyclesv1.ReleaseReservationResponse, error) {
					return e.led.Release(ctx, e.tenant, r)
				}, e.ctx, &cyclesv1.ReleaseReservationRequest{ReservationId: rid, IdempotencyKey: "rel"})
			case "commit":
				must(t, func(ctx context.Context, r *cyclesv1.CommitReservationRequest) (*cyclesv1.CommitReservationResponse, error) {
					return e.led.Commit(ctx, e.tenant, r)
				}, e.ctx, &cyclesv1.CommitReservationRequest{ReservationId: rid, IdempotencyKey: "com",
					Actual: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 5}})
			case "expire":
				exec := scripttest.On(t, e.rdb)
				sw := sweeper.New(exec, sweeper.Options{})
				for expired := int64(0); expired == 0; {
					time.Sleep(200 * time.Millisecond)
					cnt, _, err := sw.SweepTenant(e.ctx, e.tenant)
					if err != nil {
						t.Fatal(err)
					}
					expired = cnt.Expired
				}
			}
			want := "ACTION_QUOTA_EXCEEDED"
			if c.refunds {
				want = "ALLOW"
			}
			if got, _, _ := e.try(bot, email, "live"); got != want {
				t.Fatalf("after %s: %s, want %s", c.settle, got, want)
			}
		})
	}
}

// TestQuotaExactUnderConcurrency: N racing reserves against a quota of K
// admit exactly min(N, K), per-kind and risk-class, on every backend (and on
// the Cluster leg: CYCLES_TEST_REDIS=cluster).
func TestQuotaExactUnderConcurrency(t *testing.T) {
	for _, be := range redistest.Backends(t) {
		for _, c := range []struct {
			name string
			n, k int
			risk bool
		}{{"kind 40 vs 7", 40, 7, false}, {"kind 5 vs 9", 5, 9, false}, {"risk 30 vs 11", 30, 11, true}} {
			t.Run(be.Name+"/"+c.name, func(t *testing.T) {
				e := newEnvFor(t, be)
				e.oneHour()
				p := &cyclesv1.CreateScopePolicyRequest{ScopePattern: "*"}
				if c.risk {
					p.RiskClassQuotas = []*cyclesv1.RiskClassQuota{{RiskClass: extSide, MaxCalls: int64(c.k), Window: perHour}}
				} else {
					p.ActionQuotas = []*cyclesv1.ActionQuota{aq(email, int64(c.k), perRun)}
				}
				e.create(p)
				kinds := []string{email, "message.slack.post", "message.sms.send"}
				got := raceOutcomes(t, c.n, "ALLOW", func(i int) error {
					req := &cyclesv1.CreateReservationRequest{IdempotencyKey: fmt.Sprintf("race-%d", i),
						Subject: &cyclesv1.Subject{Workspace: "prod", Agent: "bot", Dimensions: map[string]string{"run_id": "r"}},
						Action:  &cyclesv1.Action{Kind: email, Name: "m"}, Estimate: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 1}}
					if c.risk {
						req.Action.Kind = kinds[i%len(kinds)]
					}
					return errtest.ErrOf(e.led.Reserve(e.ctx, e.tenant, req))
				})
				admitsExactly(t, got, "ALLOW", "ACTION_QUOTA_EXCEEDED", c.n, c.k)
				for k, v := range e.counters() {
					if v != fmt.Sprint(min(c.n, c.k)) {
						t.Fatalf("counter %s = %s, want %d", k, v, min(c.n, c.k))
					}
				}
			})
		}
	}
}

// TestValidateGovernancePatch: an update may not set both lists non-empty
// in one request (validate, before any script).
func TestValidateGovernancePatch(t *testing.T) {
	err := validate.Message(&cyclesv1.UpdateScopePolicyRequest{TenantId: "t", PolicyId: "pol_t_0",
		AllowedActionKinds: &cyclesv1.ActionKindList{Kinds: []string{"a.b"}}, DeniedActionKinds: &cyclesv1.ActionKindList{Kinds: []string{"c.d"}}})
	wantField(t, err, "denied_action_kinds")
}

// TestQuotaCounters: the operator listing (filters, pages) and the reset of
// one counter (previous count, calls admitted again, NOT_FOUND for none).
func TestQuotaCounters(t *testing.T) {
	e := newEnv(t)
	e.oneHour()
	e.create(&cyclesv1.CreateScopePolicyRequest{ScopePattern: "*", ActionQuotas: []*cyclesv1.ActionQuota{aq(email, 2, perRun)},
		RiskClassQuotas: []*cyclesv1.RiskClassQuota{{RiskClass: extSide, MaxCalls: 10, Window: perDay}}})
	for _, s := range []*cyclesv1.Subject{bot, bot, prod} {
		if got, _, _ := e.try(s, email, "live"); got != "ALLOW" {
			t.Fatalf("call: %s", got)
		}
	}
	list := func(r *cyclesv1.ListActionQuotaCountersRequest) *cyclesv1.ListActionQuotaCountersResponse {
		r.TenantId = e.tenant
		return must(t, e.pol.ListActionQuotaCounters, e.ctx, r)
	}
	all := list(&cyclesv1.ListActionQuotaCountersRequest{})
	if len(all.GetCounters()) != 4 || all.GetHasMore() { // 2 kind counters (bot, prod) + 2 risk counters
		t.Fatalf("all counters: %v", all)
	}
	var pages []*cyclesv1.ActionQuotaState
	for cur := ""; ; {
		p := list(&cyclesv1.ListActionQuotaCountersRequest{Limit: 3, Cursor: cur})
		pages = append(pages, p.GetCounters()...)
		if !p.GetHasMore() {
			break
		}
		cur = p.GetNextCursor()
	}
	if len(pages) != 4 {
		t.Fatalf("paged %d counters, want 4", len(pages))
	}
	botScope := "tenant:" + e.tenant + "/workspace:prod/agent:bot"
	one := list(&cyclesv1.ListActionQuotaCountersRequest{Scope: botScope, ActionKind: email})
	if len(one.GetCounters()) != 1 {
		t.Fatalf("filtered: %v", one)
	}
	c := one.GetCounters()[0]
	if c.GetUsed() != 2 || c.GetLimit() != 2 || c.GetRemaining() != 0 || c.GetWindow() != perRun || c.GetWindowKey() != "run-1" || c.GetPolicyId() == "" {
		t.Fatalf("counter %v", c)
	}
	risk := list(&cyclesv1.ListActionQuotaCountersRequest{ActionKind: actionkind.RiskCounter, Window: perDay})
	if len(risk.GetCounters()) != 2 || risk.GetCounters()[0].GetRiskClass() != extSide {
		t.Fatalf("risk counters: %v", risk)
	}
	if got, _, _ := e.try(bot, email, "live"); got != "ACTION_QUOTA_EXCEEDED" {
		t.Fatalf("at the quota: %s", got)
	}
	reset := func(r *cyclesv1.ResetActionQuotaCounterRequest) (*cyclesv1.ResetActionQuotaCounterResponse, error) {
		r.TenantId = e.tenant
		return call(e.ctx, e.pol.ResetActionQuotaCounter, r)
	}
	r, err := reset(&cyclesv1.ResetActionQuotaCounterRequest{Scope: botScope, ActionKind: email, Window: perRun, WindowKey: "run-1", Reason: "stuck"})
	if err != nil || r.GetPreviousUsed() != 2 || r.GetCounter().GetUsed() != 0 {
		t.Fatalf("reset: %v %v", r, err)
	}
	// The filters of the spec's listing: scope (itself and below), run_id
	// (per_run counters of that run), include_zero (the reset counter).
	tenantScope := "tenant:" + e.tenant
	for _, f := range []struct {
		name string
		req  *cyclesv1.ListActionQuotaCountersRequest
		want int
	}{
		{"tenant scope and below", &cyclesv1.ListActionQuotaCountersRequest{Scope: tenantScope}, 3},
		{"workspace and below", &cyclesv1.ListActionQuotaCountersRequest{Scope: tenantScope + "/workspace:prod"}, 3},
		{"agent only", &cyclesv1.ListActionQuotaCountersRequest{Scope: botScope}, 1},
		{"a prefix that is not a scope", &cyclesv1.ListActionQuotaCountersRequest{Scope: tenantScope + "/workspace:pro"}, 0},
		{"run_id", &cyclesv1.ListActionQuotaCountersRequest{RunId: "run-1"}, 1},
		{"another run_id", &cyclesv1.ListActionQuotaCountersRequest{RunId: "run-2"}, 0},
		{"include_zero", &cyclesv1.ListActionQuotaCountersRequest{IncludeZero: true}, 4},
		{"include_zero, run_id", &cyclesv1.ListActionQuotaCountersRequest{IncludeZero: true, RunId: "run-1"}, 2},
	} {
		if got := list(f.req).GetCounters(); len(got) != f.want {
			t.Errorf("%s: %d counters, want %d: %v", f.name, len(got), f.want, got)
		}
	}
	_, err = call(e.ctx, e.pol.ListActionQuotaCounters, &cyclesv1.ListActionQuotaCountersRequest{TenantId: e.tenant, RunId: strings.Repeat("r", 257)})
	wantField(t, err, "run_id")
	// A tenant key lists its own tenant (implied when tenant_id is empty),
	// never another; the admin key must name one.
	own := auth.WithPrincipal(context.Background(), auth.Principal{Tenant: e.tenant, KeyID: "k"})
	if l, err := e.pol.ListActionQuotaCounters(own, &cyclesv1.ListActionQuotaCountersRequest{}); err != nil || len(l.GetCounters()) != 3 {
		t.Fatalf("own tenant: %v %v", l, err)
	}
	_, err = e.pol.ListActionQuotaCounters(own, &cyclesv1.ListActionQuotaCountersRequest{TenantId: "someone-else"})
	wantCode(t, err, apierr.Forbidden)
	_, err = e.pol.ListActionQuotaCounters(e.ctx, &cyclesv1.ListActionQuotaCountersRequest{})
	wantField(t, err, "tenant_id")
	if got, _, _ := e.try(bot, email, "live"); got != "ALLOW" {
		t.Fatalf("after the reset: %s", got)
	}
	_, err = reset(&cyclesv1.ResetActionQuotaCounterRequest{Scope: botScope, ActionKind: email, Window: perRun, WindowKey: "run-2"})
	wantCode(t, err, apierr.NotFound)
	_, err = reset(&cyclesv1.ResetActionQuotaCounterRequest{Scope: botScope, ActionKind: actionkind.RiskCounter, Window: perDay, WindowKey: "x"})
	wantField(t, err, "risk_class")
}

// TestQuotaCalendarCounterReset: resetting a calendar counter (a field of
// the day hash, lib/quota.lua) sets its count to 0 and keeps its limit and
// policy (the listing and the reset's answer show them), the calls are
// admitted again, and the next count starts from 0; on every backend (the
// embedded store formats the value too).
func TestQuotaCalendarCounterReset(t *testing.T) {
	for _, be := range redistest.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			e := newEnvFor(t, be)
			e.oneHour()
			p := e.create(&cyclesv1.CreateScopePolicyRequest{ScopePattern: "*", ActionQuotas: []*cyclesv1.ActionQuota{aq(email, 2, perDay)}})
			for _, want := range []string{"ALLOW", "ALLOW", "ACTION_QUOTA_EXCEEDED"} {
				if got, _, _ := e.try(bot, email, "live"); got != want {
					t.Fatalf("call: %s, want %s", got, want)
				}
			}
			botScope := "tenant:" + e.tenant + "/workspace:prod/agent:bot"
			state := func(want int64) *cyclesv1.ActionQuotaState {
				t.Helper()
				l := must(t, e.pol.ListActionQuotaCounters, e.ctx, &cyclesv1.ListActionQuotaCountersRequest{TenantId: e.tenant,
					Scope: botScope, IncludeZero: true})
				if len(l.GetCounters()) != 1 {
					t.Fatalf("counters: %v", l)
				}
				c := l.GetCounters()[0]
				if c.GetUsed() != want || c.GetLimit() != 2 || c.GetPolicyId() != p.GetPolicyId() || c.GetWindow() != perDay {
					t.Fatalf("counter %v, want used %d, limit 2, policy %s", c, want, p.GetPolicyId())
				}
				return c
			}
			c := state(2)
			r, err := call(e.ctx, e.pol.ResetActionQuotaCounter, &cyclesv1.ResetActionQuotaCounterRequest{TenantId: e.tenant,
				Scope: botScope, ActionKind: email, Window: perDay, WindowKey: c.GetWindowKey(), Reason: "test"})
			if err != nil || r.GetPreviousUsed() != 2 || r.GetCounter().GetUsed() != 0 || r.GetCounter().GetLimit() != 2 ||
				r.GetCounter().GetPolicyId() != p.GetPolicyId() {
				t.Fatalf("reset: %v %v", r, err)
			}
			state(0)
			if got, _, _ := e.try(bot, email, "live"); got != "ALLOW" {
				t.Fatalf("after the reset: %s", got)
			}
			state(1)
		})
	}
}

// raceOutcomes runs call(0..n-1) at once and counts the outcomes: ok for a
// call without error, else the error's code. An error that is not an API
// error fails t.
func raceOutcomes(t *testing.T, n int, ok string, call func(i int) error) map[string]int {
	t.Helper()
	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			code := ok
			if err := call(i); err != nil {
				ae, isAPI := apierr.As(err)
				if !isAPI {
					t.Errorf("call %d: %v", i, err)
					return
				}
				code = string(ae.Code)
			}
			mu.Lock()
			got[code]++
			mu.Unlock()
		})
	}
	wg.Wait()
	return got
}

// admitsExactly fails t unless the outcomes of n racing calls against a
// limit of k are min(n, k) ok and the rest refused with the code refusal.
func admitsExactly(t *testing.T, got map[string]int, ok, refusal string, n, k int) {
	t.Helper()
	want := map[string]int{ok: min(n, k)}
	if n > k {
		want[refusal] = n - k
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("outcomes %v, want %v", got, want)
	}
}

// TestQuotaCounterLimitFollowsPolicyChange: the listing's limit and policy
// of a calendar counter (derived from the current policies, or for a
// per_tenant_per_day counter its '@' field; lib/quota.lua) follow a policy
// update within the window instance, for a scope path and the tenant scope,
// also once the Functions library has memoized the plan and counted the
// counter in this window, and for a second scope path counted under the
// same plan; a counter no rule limits any more lists limit 0.
func TestQuotaCounterLimitFollowsPolicyChange(t *testing.T) {
	for _, be := range redistest.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			e := newEnvFor(t, be)
			e.oneHour()
			quotas := func(max int64) []*cyclesv1.ActionQuota {
				return []*cyclesv1.ActionQuota{aq(email, max, perDay), aq(email, max, perTDay)}
			}
			p := e.create(&cyclesv1.CreateScopePolicyRequest{ScopePattern: "*", ActionQuotas: quotas(10)})
			limits := func(want int64, used map[string]int64) {
				t.Helper()
				page := must(t, e.pol.ListActionQuotaCounters, e.ctx, &cyclesv1.ListActionQuotaCountersRequest{TenantId: e.tenant})
				if len(page.GetCounters()) != len(used) {
					t.Fatalf("counters %v, want %d", page.GetCounters(), len(used))
				}
				for _, c := range page.GetCounters() {
					k := c.GetScope() + "|" + c.GetWindow().String()
					if c.GetLimit() != want || c.GetPolicyId() != p.GetPolicyId() || c.GetUsed() != used[k] {
						t.Fatalf("counter %s: %v, want limit %d, used %d", k, c, want, used[k])
					}
				}
			}
			for _, s := range []*cyclesv1.Subject{bot, bot, prod} {
				if got, _, _ := e.try(s, email, "live"); got != "ALLOW" {
					t.Fatalf("call: %s", got)
				}
			}
			ts := "tenant:" + e.tenant
			bs, ps := ts+"/workspace:prod/agent:bot", ts+"/workspace:prod"
			day, tday := perDay.String(), perTDay.String()
			limits(10, map[string]int64{bs + "|" + day: 2, ps + "|" + day: 1, ts + "|" + tday: 3})
			must(t, e.pol.UpdateScopePolicy, e.ctx, &cyclesv1.UpdateScopePolicyRequest{TenantId: e.tenant, PolicyId: p.GetPolicyId(),
				ActionQuotas: &cyclesv1.ActionQuotaList{Quotas: quotas(20)}})
			for _, s := range []*cyclesv1.Subject{bot, prod} {
				if got, _, _ := e.try(s, email, "live"); got != "ALLOW" {
					t.Fatalf("call after the update: %s", got)
				}
			}
			limits(20, map[string]int64{bs + "|" + day: 3, ps + "|" + day: 2, ts + "|" + tday: 5})
			// A counter no current rule gives a limit: limit 0, no policy (the
			// per_tenant_per_day one keeps the limit it was counted under).
			must(t, e.pol.UpdateScopePolicy, e.ctx, &cyclesv1.UpdateScopePolicyRequest{TenantId: e.tenant, PolicyId: p.GetPolicyId(),
				ActionQuotas: &cyclesv1.ActionQuotaList{Quotas: []*cyclesv1.ActionQuota{aq(email, 30, perTDay)}}})
			page := must(t, e.pol.ListActionQuotaCounters, e.ctx, &cyclesv1.ListActionQuotaCountersRequest{TenantId: e.tenant})
			for _, c := range page.GetCounters() {
				want, pol := int64(0), ""
				if c.GetWindow() == perTDay {
					want, pol = 20, p.GetPolicyId()
				}
				if c.GetLimit() != want || c.GetPolicyId() != pol {
					t.Fatalf("counter %v after the per_day quota was removed: want limit %d, policy %q", c, want, pol)
				}
			}
		})
	}
}

// TestQuotaDayHashIsHashTable: the day hash of the calendar counters is a
// hash table from its first count, even when every field would fit a
// listpack (short scope paths), whose lookups are linear scans of up to
// hash-max-listpack-entries fields (lib/quota.lua pads its '_' field;
// BENCHMARKS.md, "A new agent's names").
func TestQuotaDayHashIsHashTable(t *testing.T) {
	e := newEnv(t)
	e.oneHour() // the call and the TIME read below on one UTC day
	e.create(&cyclesv1.CreateScopePolicyRequest{ScopePattern: "*", ActionQuotas: []*cyclesv1.ActionQuota{aq(email, 5, perTDay)}})
	if got, _, _ := e.try(bot, email, "live"); got != "ALLOW" {
		t.Fatalf("call: %s", got)
	}
	now, err := e.rdb.Time(e.ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	day := keys.Tenant(e.tenant).QuotaDay(strconv.FormatInt(now.UnixMilli()/86_400_000, 10))
	fields, err := e.rdb.HKeys(e.ctx, day).Result()
	if err != nil || len(fields) == 0 {
		t.Fatalf("day hash %s: %v %v", day, fields, err)
	}
	for _, f := range fields {
		if len(f) > 64 {
			t.Fatalf("field %q is longer than a listpack's: the test needs short ones", f)
		}
	}
	if enc := e.rdb.ObjectEncoding(e.ctx, day).Val(); enc != "hashtable" {
		t.Fatalf("day hash encoding = %s, want hashtable", enc)
	}
}
