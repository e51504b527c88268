package keys_test

import (
	"testing"

	"github.com/cyclesgo/cycles-go/internal/keys"
)

// The exact layout: the Lua scripts build the same names by concatenation.
func TestTenantKeyLayout(t *testing.T) {
	tn := keys.Tenant("acme")
	for got, want := range map[string]string{
		tn.Prefix():                                 "cy:{t:acme}:",
		tn.Record():                                 "cy:{t:acme}:tenant",
		tn.Budget("tenant:acme/app:x", "TOKENS"):    "cy:{t:acme}:b:tenant:acme/app:x:TOKENS",
		tn.Reservation("r_acme_1"):                  "cy:{t:acme}:r:r_acme_1",
		tn.Deadlines():                              "cy:{t:acme}:r:deadline",
		tn.Idempotency("reserve", "k:1"):            "cy:{t:acme}:idem:reserve:k:1",
		keys.Tenant("").Budget("", ""):              "cy:{t:}:b::",
		tn.APIKey(""):                               "cy:{t:acme}:apikey:",
		keys.BudgetMember("tenant:acme", "CREDITS"): "tenant:acme|CREDITS",
	} {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}

func BenchmarkTenantBudgetKey(b *testing.B) {
	tn := keys.Tenant("acme")
	b.ReportAllocs()
	for b.Loop() {
		_ = tn.Budget("tenant:acme/workspace:prod/app:chat", "TOKENS")
	}
}
