package validate_test

import (
	"testing"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/pkg/validate"
)

// BenchmarkMessageReserve validates a typical valid reservation request.
func BenchmarkMessageReserve(b *testing.B) {
	ttl := int64(60_000)
	req := &cyclesv1.CreateReservationRequest{IdempotencyKey: "0190b7c2-6d1e-7cc4-8a3e-1b2c3d4e5f60",
		Subject:  &cyclesv1.Subject{Tenant: "acme", Workspace: "prod", App: "chat", Agent: "planner"},
		Action:   &cyclesv1.Action{Kind: "llm.completion", Name: "gpt-4o"},
		Estimate: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 1000}, TtlMs: &ttl}
	b.ReportAllocs()
	for b.Loop() {
		if err := validate.Message(req); err != nil {
			b.Fatal(err)
		}
	}
}
