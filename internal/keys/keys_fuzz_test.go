package keys_test

import (
	"testing"

	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/test/property/hashslot"
)

// FuzzTenantKeys: for every tenant id the auth layer accepts, every key of the
// tenant, whatever the caller-supplied parts (ids, idempotency keys, scope
// paths, units), carries exactly the tenant's hash tag, so all of them live in
// the tenant's Cluster slot. The parts come after the tag, so even '{' and
// '}' in them cannot move a key.
func FuzzTenantKeys(f *testing.F) {
	f.Add("acme", "tenant:acme/workspace:prod", "TOKENS")
	f.Add("a", "", "")
	f.Add("t_1.x-y", "{t:other}", "}{")
	f.Add("acme", "r:deadline", "idem:reserve:k")
	f.Fuzz(func(t *testing.T, tenant, a, b string) {
		tn := keys.Tenant(tenant)
		all := map[string]string{
			"Record": tn.Record(), "APIKey": tn.APIKey(a), "APIKeys": tn.APIKeys(),
			"Budget": tn.Budget(a, b), "Budgets": tn.Budgets(), "Reservation": tn.Reservation(a),
			"Deadlines": tn.Deadlines(), "Created": tn.Created(), "Expires": tn.Expires(),
			"Idempotency": tn.Idempotency(a, b), "Event": tn.Event(a), "Events": tn.Events(),
		}
		_ = keys.BudgetMember(a, b)
		if !auth.ValidTenantID(tenant) {
			return // never reaches key building: auth and validation refuse it
		}
		wantTag := "t:" + tenant
		wantSlot := hashslot.Slot(tn.Prefix())
		for name, k := range all {
			if got := hashslot.Tag(k); got != wantTag {
				t.Fatalf("%s key %q hashes tag %q, want %q", name, k, got, wantTag)
			}
			if got := hashslot.Slot(k); got != wantSlot {
				t.Fatalf("%s key %q is in slot %d, tenant %q is in %d", name, k, got, tenant, wantSlot)
			}
		}
	})
}
