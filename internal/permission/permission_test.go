package permission

import "testing"

func TestGrants(t *testing.T) {
	for _, c := range []struct {
		held []string
		need string
		want bool
	}{
		{[]string{"reservations:create"}, "reservations:create", true},
		{[]string{"reservations:create"}, "reservations:commit", false},
		{[]string{"admin:write"}, "budgets:write", true},
		{[]string{"admin:write"}, "budgets:read", false},
		{[]string{"admin:read"}, "events:read", true},
		{[]string{"admin:read"}, "budgets:write", false},
		{[]string{"admin:read"}, "reservations:create", false},
		{nil, "", true},
		{nil, "balances:read", false},
	} {
		if got := Grants(c.held, c.need); got != c.want {
			t.Errorf("Grants(%v, %q) = %v, want %v", c.held, c.need, got, c.want)
		}
	}
}

func TestSetsAreValid(t *testing.T) {
	for name, set := range map[string][]string{"Default": Default, "Legacy": Legacy} {
		if i, err := Check(set); err != nil {
			t.Errorf("%s[%d]: %v", name, i, err)
		}
	}
	if i, err := Check([]string{"balances:read", "nope"}); err == nil || i != 1 {
		t.Errorf("unknown permission: got %d, %v", i, err)
	}
	if i, err := Check([]string{"balances:read", "balances:read"}); err == nil || i != 1 {
		t.Errorf("duplicate permission: got %d, %v", i, err)
	}
}

func TestCapabilities(t *testing.T) {
	required := []string{"view_overview", "view_budgets", "view_events", "view_webhooks", "view_audit", "view_tenants", "view_api_keys", "view_policies"}
	admin := Capabilities(true, nil)
	for f, v := range admin {
		if !v {
			t.Errorf("admin: %s is false", f)
		}
	}
	tenant := Capabilities(false, []string{"admin:read", "admin:write", "budgets:read"})
	for _, f := range required {
		if _, ok := tenant[f]; !ok {
			t.Errorf("tenant: required flag %s missing", f)
		}
	}
	for _, f := range adminPlane {
		if tenant[f] {
			t.Errorf("tenant with admin:* permissions: admin-plane flag %s is true", f)
		}
	}
	if !tenant["view_budgets"] || !tenant["manage_budgets"] || !tenant["view_events"] {
		t.Errorf("tenant flags: %v", tenant)
	}
	def := Capabilities(false, Default)
	if def["view_events"] || def["view_webhooks"] || !def["view_reservations"] {
		t.Errorf("default set flags: %v", def)
	}
}
