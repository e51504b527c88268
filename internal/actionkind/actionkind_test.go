package actionkind

import (
	"encoding/json"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
)

func TestBuiltinRegistryIsWellFormed(t *testing.T) {
	if len(builtin) != 62 {
		t.Fatalf("%d built-in kinds, want the v0.1.26 registry's 62", len(builtin))
	}
	seen := map[string]bool{}
	prefixes := map[string]string{}
	for _, k := range builtin {
		if seen[k.Name] {
			t.Fatalf("%s listed twice", k.Name)
		}
		seen[k.Name] = true
		if _, ok := ParseRisk(string(k.Risk)); !ok || k.Description == "" || len(k.Name) > MaxKindLen {
			t.Fatalf("%s: risk %q, description %q", k.Name, k.Risk, k.Description)
		}
		if strings.HasPrefix(k.Name, CustomPrefix) || strings.Count(k.Name, ".") < 1 {
			t.Fatalf("%s is not <category>.<operation>", k.Name)
		}
		for _, p := range k.MCPToolPrefixes {
			if other, dup := prefixes[p]; dup {
				t.Fatalf("MCP prefix %q on %s and %s", p, other, k.Name)
			}
			prefixes[p] = k.Name
		}
	}
}

func TestClassify(t *testing.T) {
	reg, err := New([]Kind{{Name: "custom.acme.erp.post", Risk: HighRisk}})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		kind       string
		risk       RiskClass
		registered bool
	}{
		{"llm.completion", SideEffect, true},
		{"message.email.send", ExternalSideEffect, true},
		{"payment.charge", HighRisk, true},
		{"file.write", LocalMutation, true},
		{"db.query", ReadOnly, true},
		{"custom.acme.erp.post", HighRisk, true},
		// Unregistered outside custom.*: accepted as side_effect.
		{"proprietary.action", SideEffect, false},
		{"", SideEffect, false},
		// Undeclared custom.*: no class (refused where kinds are governed).
		{"custom.acme.erp.other", "", false},
	}
	for _, tc := range cases {
		got := reg.Classify(tc.kind)
		if got.Risk != tc.risk || got.Registered != tc.registered {
			t.Errorf("Classify(%q) = %+v, want risk %q registered %v", tc.kind, got, tc.risk, tc.registered)
		}
	}
	if e := UndeclaredCustom("custom.x.y"); e.Code != apierr.InvalidRequest || e.Details["field"] != "action.kind" {
		t.Fatalf("UndeclaredCustom = %+v", e)
	}
}

func TestCustomDeclarations(t *testing.T) {
	cases := []struct {
		in      string
		wantErr bool
		n       int
	}{
		{"", false, 0},
		{"custom.acme.erp.post=side_effect, custom.acme.sap.query=read_only", false, 2},
		{"custom.acme=side_effect", true, 0},                   // no operation
		{"acme.erp.post=side_effect", true, 0},                 // not custom.*
		{"custom.acme.erp.post=dangerous", true, 0},            // unknown class
		{"custom.acme.erp.post", true, 0},                      // no class
		{"custom.a.b=read_only,custom.a.b=read_only", true, 0}, // twice
	}
	for _, tc := range cases {
		kinds, err := ParseCustom(tc.in)
		if err == nil {
			_, err = New(kinds)
		}
		if (err != nil) != tc.wantErr || (err == nil && len(kinds) != tc.n) {
			t.Errorf("%q: err %v, %d kinds", tc.in, err, len(kinds))
		}
	}
}

func TestListPagesAndFilters(t *testing.T) {
	reg, _ := New(nil)
	var all []string
	cursor := ""
	for {
		page, err := reg.List("", false, cursor, 7)
		if err != nil {
			t.Fatal(err)
		}
		if page.GetVersion() != Version || len(page.GetKinds()) > 7 {
			t.Fatalf("page %v", page)
		}
		for _, k := range page.GetKinds() {
			all = append(all, k.GetKind())
		}
		if !page.GetHasMore() {
			break
		}
		cursor = page.GetNextCursor()
	}
	if strings.Join(all, ",") != strings.Join(Kinds(), ",") {
		t.Fatalf("paged %d kinds, registry has %d", len(all), len(Kinds()))
	}
	page, err := reg.List(HighRisk, false, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range page.GetKinds() {
		if k.GetRiskClass() != cyclesv1.ActionRiskClass_ACTION_RISK_CLASS_HIGH_RISK {
			t.Fatalf("%s in the high_risk page", k.GetKind())
		}
	}
	if len(page.GetKinds()) == 0 || page.GetHasMore() {
		t.Fatalf("high_risk page: %d kinds, has_more %v", len(page.GetKinds()), page.GetHasMore())
	}
	for _, bad := range []struct {
		cursor string
		limit  int
	}{{"no.such", 10}, {"", 101}, {"", -1}} {
		if _, err := reg.List("", false, bad.cursor, bad.limit); !apierr.HasCode(err, apierr.InvalidRequest) {
			t.Fatalf("List(cursor %q, limit %d): %v", bad.cursor, bad.limit, err)
		}
	}
	if _, err := reg.Get("custom.acme.x"); !apierr.HasCode(err, apierr.NotFound) {
		t.Fatalf("Get(custom): %v", err)
	}
	k, err := reg.Get("message.email.send")
	if err != nil || !k.GetPolicyKeySpec().GetHost() || !k.GetPolicyKeySpec().GetRecipientDomain() {
		t.Fatalf("Get(message.email.send) = %v, %v", k, err)
	}
}

// The scripts write amounts as numbers or strings; the wire always has
// integers, exact beyond 2^53.
func TestDenyDetailRoundTrip(t *testing.T) {
	in := `{"reason_code":"ACTION_QUOTA_EXCEEDED","quota_violation":{"action_kind":"message.email.send",` +
		`"risk_class":"external_side_effect","window":"per_hour_tumbling","window_key":"2026-04-09T14","used":"50",` +
		`"limit":50,"scope":"tenant:acme/agent:bot","policy_id":"pol_1"},"blocked_by_policy":"pol_1",` +
		`"blocked_by_scope":"tenant:acme/agent:bot","suggested_fix":"raise it","budget_remaining":"-9007199254740993"}`
	d, err := ParseDenyDetail(in)
	if err != nil {
		t.Fatal(err)
	}
	want := &cyclesv1.DenyDetail{
		ReasonCode: "ACTION_QUOTA_EXCEEDED", BlockedByPolicy: "pol_1", BlockedByScope: "tenant:acme/agent:bot",
		SuggestedFix: "raise it", BudgetRemaining: proto.Int64(-9007199254740993),
		QuotaViolation: &cyclesv1.ActionQuotaViolation{
			ActionKind: "message.email.send", RiskClass: cyclesv1.ActionRiskClass_ACTION_RISK_CLASS_EXTERNAL_SIDE_EFFECT,
			Window: cyclesv1.ActionQuotaWindow_ACTION_QUOTA_WINDOW_PER_HOUR_TUMBLING, WindowKey: "2026-04-09T14",
			Used: 50, Limit: 50, Scope: "tenant:acme/agent:bot", PolicyId: "pol_1",
		},
	}
	if !proto.Equal(d, want) {
		t.Fatalf("parsed %v\nwant %v", d, want)
	}
	out := DenyDetailString(d)
	var m map[string]any
	dec := json.NewDecoder(strings.NewReader(out))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		t.Fatal(err)
	}
	if m["budget_remaining"].(json.Number).String() != "-9007199254740993" {
		t.Fatalf("budget_remaining %v", m["budget_remaining"])
	}
	if q := m["quota_violation"].(map[string]any); q["used"].(json.Number).String() != "50" || q["window"] != "per_hour_tumbling" {
		t.Fatalf("quota_violation %v", q)
	}
	back, err := ParseDenyDetail(out)
	if err != nil || !proto.Equal(back, want) {
		t.Fatalf("round trip %v, %v", back, err)
	}
	for _, bad := range []string{`{}`, `{"reason_code":"X","budget_remaining":1.5}`, `nope`} {
		if _, err := ParseDenyDetail(bad); err == nil {
			t.Fatalf("ParseDenyDetail(%s) accepted", bad)
		}
	}
	if d, err := ParseDenyDetail(""); d != nil || err != nil {
		t.Fatalf("empty: %v %v", d, err)
	}
}

func TestEnumNames(t *testing.T) {
	for _, w := range windows {
		if p, ok := ParseWindow(w.s); !ok || WindowName(p) != w.s {
			t.Fatalf("window %s", w.s)
		}
	}
	for _, s := range []string{"DISABLED", "OBSERVE", "ENFORCE"} {
		if m, ok := ParseObserveMode(s); !ok || ObserveModeName(m) != s {
			t.Fatalf("observe mode %s", s)
		}
	}
	if _, ok := ParseObserveMode("observe"); ok {
		t.Fatal("lower-case observe mode accepted")
	}
	if ObserveModeName(cyclesv1.ObserveMode_OBSERVE_MODE_UNSPECIFIED) != "ENFORCE" {
		t.Fatal("unset observe mode is not ENFORCE")
	}
}
