package actionkind

import (
	"testing"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
)

// TestMatchKeys: only the dimensions a kind's policy_key_spec declares may
// match; a kind without a registry spec matches every provided key.
func TestMatchKeys(t *testing.T) {
	r, err := New([]Kind{{Name: "custom.acme.erp.post", Risk: SideEffect}})
	if err != nil {
		t.Fatal(err)
	}
	all := &cyclesv1.ActionPolicyKeys{Host: "h.example", RecipientDomain: "d.example", ResourceType: "orders", PathPrefix: "/x",
		Custom: map[string]string{"k": "v"}}
	for _, c := range []struct {
		kind string
		pk   *cyclesv1.ActionPolicyKeys
		want string
	}{
		{"message.email.send", nil, ""},
		{"message.email.send", all, `{"host":"h.example","recipient_domain":"d.example"}`},
		{"message.sms.send", all, `{"recipient_domain":"d.example"}`},
		{"message.sms.send", &cyclesv1.ActionPolicyKeys{Host: "h.example"}, ""},
		{"db.write", all, `{"resource_type":"orders"}`},
		{"custom.acme.erp.post", all, `{"host":"h.example","recipient_domain":"d.example","resource_type":"orders"}`},
		{"acme.unlisted", &cyclesv1.ActionPolicyKeys{Host: "h.example"}, `{"host":"h.example"}`},
	} {
		if got := r.MatchKeys(c.kind, c.pk); got != c.want {
			t.Errorf("%s %v: %s, want %s", c.kind, c.pk, got, c.want)
		}
	}
}
