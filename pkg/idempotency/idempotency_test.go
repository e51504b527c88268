package idempotency

import (
	"testing"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
)

// Equal payloads hash equal (map order does not matter); any field change
// changes the hash.
func TestPayloadHash(t *testing.T) {
	a := &cyclesv1.FundBudgetRequest{TenantId: "t", ScopePath: "tenant:t", Amount: 5, IdempotencyKey: "k"}
	b := &cyclesv1.FundBudgetRequest{TenantId: "t", ScopePath: "tenant:t", Amount: 5, IdempotencyKey: "k"}
	ha, err := PayloadHash(a)
	if err != nil {
		t.Fatal(err)
	}
	hb, _ := PayloadHash(b)
	if ha != hb || len(ha) != 64 {
		t.Fatalf("equal payloads: %q vs %q", ha, hb)
	}
	b.Amount = 6
	if hc, _ := PayloadHash(b); hc == ha {
		t.Fatal("a different amount hashed the same")
	}
}
