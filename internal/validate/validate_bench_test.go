package validate_test

import (
	"strings"

	"testing"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/validate"
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

// The composed field names still name the offending field.
func TestSpendFieldNames(t *testing.T) {
	ok := func() *cyclesv1.CreateReservationRequest {
		return &cyclesv1.CreateReservationRequest{IdempotencyKey: "k",
			Subject:  &cyclesv1.Subject{Tenant: "acme"},
			Action:   &cyclesv1.Action{Kind: "llm", Name: "m"},
			Estimate: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 1}}
	}
	for _, tc := range []struct {
		field string
		spoil func(r *cyclesv1.CreateReservationRequest)
	}{
		{"action.kind", func(r *cyclesv1.CreateReservationRequest) { r.Action.Kind = "a\x01" }},
		{"action.kind", func(r *cyclesv1.CreateReservationRequest) { r.Action.Kind = strings.Repeat("k", 65) }},
		{"action.name", func(r *cyclesv1.CreateReservationRequest) { r.Action.Name = "\x7f" }},
		{"estimate.unit", func(r *cyclesv1.CreateReservationRequest) { r.Estimate.Unit = cyclesv1.Unit_UNIT_UNSPECIFIED }},
		{"subject.dimensions.k", func(r *cyclesv1.CreateReservationRequest) { r.Subject.Dimensions = map[string]string{"k": "\n"} }},
	} {
		r := ok()
		tc.spoil(r)
		e, isAPI := apierr.As(validate.Message(r))
		if !isAPI || e.Details["field"] != tc.field {
			t.Errorf("%s: got %v", tc.field, e)
		}
	}
	if err := validate.Message(ok()); err != nil {
		t.Fatal(err)
	}
}
