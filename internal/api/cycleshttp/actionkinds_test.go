package cycleshttp_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/actionkind"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/test/redistest"
)

// The registry is public on both wires: no key, the same kinds, exact-match
// lookups, 404 for unknown and custom kinds, 400 for bad filters, and a 304
// for a client holding the current version.
func TestActionKindRegistry(t *testing.T) {
	e := start(t, redistest.SharedClient(t))
	cases := []struct {
		name, path string
		status     int
		check      func(t *testing.T, m map[string]any)
	}{
		{"list", "/v1/action-kinds?limit=100", 200, func(t *testing.T, m map[string]any) {
			kinds := m["kinds"].([]any)
			if m["version"] != actionkind.Version || len(kinds) != len(actionkind.Kinds()) || m["has_more"] != false {
				t.Fatalf("version %v, %d kinds, has_more %v", m["version"], len(kinds), m["has_more"])
			}
		}},
		{"first page", "/v1/action-kinds", 200, func(t *testing.T, m map[string]any) {
			if len(m["kinds"].([]any)) != actionkind.DefaultPageSize || m["has_more"] != true || m["next_cursor"] == "" {
				t.Fatalf("first page: %v", m)
			}
		}},
		{"filter", "/v1/action-kinds?risk_class=high_risk", 200, func(t *testing.T, m map[string]any) {
			for _, k := range m["kinds"].([]any) {
				if k.(map[string]any)["risk_class"] != "high_risk" {
					t.Fatalf("%v in the high_risk list", k)
				}
			}
		}},
		{"one", "/v1/action-kinds/message.email.send", 200, func(t *testing.T, m map[string]any) {
			spec, _ := m["policy_key_spec"].(map[string]any)
			if m["kind"] != "message.email.send" || m["risk_class"] != "external_side_effect" ||
				spec["host"] != true || spec["recipient_domain"] != true {
				t.Fatalf("message.email.send: %v", m)
			}
		}},
		{"unknown", "/v1/action-kinds/message.email", 404, nil},
		{"custom", "/v1/action-kinds/custom.acme.erp.post", 404, nil},
		{"bad class", "/v1/action-kinds?risk_class=scary", 400, nil},
		{"bad limit", "/v1/action-kinds?limit=101", 400, nil},
		{"bad cursor", "/v1/action-kinds?cursor=nope", 400, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := e.call("GET", tc.path, "", "")
			if r.status != tc.status {
				t.Fatalf("status %d, want %d: %s", r.status, tc.status, r.body)
			}
			if tc.check != nil {
				tc.check(t, r.obj(t))
			}
		})
	}
	r := e.call("GET", "/v1/action-kinds", "", "")
	etag := r.header.Get("ETag")
	if etag == "" {
		t.Fatal("no ETag")
	}
	if r := e.call("GET", "/v1/action-kinds", "", "", "If-None-Match", etag); r.status != http.StatusNotModified {
		t.Fatalf("If-None-Match: %d", r.status)
	}

	// gRPC: the same registry, no key either.
	ctx := context.Background()
	page, err := e.kinds.ListActionKinds(ctx, &cyclesv1.ListActionKindsRequest{Limit: 100})
	if err != nil || len(page.GetKinds()) != len(actionkind.Kinds()) {
		t.Fatalf("ListActionKinds: %d kinds, %v", len(page.GetKinds()), err)
	}
	one, err := e.kinds.GetActionKind(ctx, &cyclesv1.GetActionKindRequest{Kind: "payment.charge"})
	if err != nil || one.GetKind().GetRiskClass() != cyclesv1.ActionRiskClass_ACTION_RISK_CLASS_HIGH_RISK {
		t.Fatalf("GetActionKind: %v, %v", one, err)
	}
	if _, err := e.kinds.GetActionKind(ctx, &cyclesv1.GetActionKindRequest{Kind: "nope.nope"}); err == nil {
		t.Fatal("unknown kind found")
	} else if code, _, _ := apierr.FromStatus(err); code != apierr.NotFound {
		t.Fatalf("unknown kind: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(e.call("GET", "/v1/action-kinds/llm.completion", "", "").body, &m); err != nil || m["risk_class"] != "side_effect" {
		t.Fatalf("llm.completion: %v %v", m, err)
	}
}
