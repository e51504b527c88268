package eventsapi

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
)

// emitted matches the event names the Lua scripts pass to emit/emit_event.
var emitted = regexp.MustCompile(`'((?:reservation|budget|tenant|api_key|policy|system|quota)\.[a-z_]+)'`)

// TestEveryEmittedEventIsTyped keeps the EventType enum, the converter table
// and the scripts in step: every name a script emits has a type and payload,
// and every type has a name.
func TestEveryEmittedEventIsTyped(t *testing.T) {
	names := map[string]bool{}
	err := filepath.WalkDir("../../../lua", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".lua" {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range emitted.FindAllSubmatch(src, -1) {
			names[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(names) < 20 {
		t.Fatalf("found only %d event names in lua/: %v", len(names), names)
	}
	for n := range names {
		k, ok := kindByName(n)
		if !ok {
			t.Errorf("the scripts emit %q but it has no EventType", n)
			continue
		}
		if TypeName(k.typ) != n {
			t.Errorf("%q maps to %v, which maps back to %q", n, k.typ, TypeName(k.typ))
		}
	}
	for num, name := range cyclesv1.EventType_name {
		if num != 0 && TypeName(cyclesv1.EventType(num)) == "" {
			t.Errorf("%s has no protocol name", name)
		}
	}
	if len(eventKinds) != len(cyclesv1.EventType_name)-1 {
		t.Errorf("%d kinds for %d types", len(eventKinds), len(cyclesv1.EventType_name)-1)
	}
}

func TestTypedDecodesTheStoredForm(t *testing.T) {
	data := func(m map[string]any) *structpb.Struct {
		s, err := structpb.NewStruct(m)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	// As the sweeper stores it: amounts as decimal strings, times as numbers.
	ev := &cyclesv1.Event{EventType: "reservation.expired", Data: data(map[string]any{
		"reservation_id": "r1", "scope": "tenant:a", "unit": "TOKENS", "estimated_amount": "9007199254740993",
		"expires_at_ms": float64(1790000000123), "ttl_ms": float64(60000), "extensions_used": float64(2),
		"expired_at": "2026-09-21T00:00:00.123Z", "unknown_later_field": true,
	})}
	Typed(ev)
	exp := ev.GetReservationExpired()
	if ev.GetType() != cyclesv1.EventType_EVENT_TYPE_RESERVATION_EXPIRED || exp == nil {
		t.Fatalf("not typed: %v", ev)
	}
	if exp.GetEstimatedAmount() != 9007199254740993 || exp.GetExpiresAtMs() != 1790000000123 ||
		exp.GetTtlMs() != 60000 || exp.GetExtensionsUsed() != 2 || exp.GetUnit() != cyclesv1.Unit_UNIT_TOKENS {
		t.Fatalf("decoded %v", exp)
	}

	// Nested states, enums without prefix, an empty Lua list encoded as {}.
	ev = &cyclesv1.Event{EventType: "budget.updated", Data: data(map[string]any{
		"scope": "tenant:a", "unit": "USD_MICROCENTS", "operation": "UPDATE", "changed_fields": map[string]any{},
		"new_state": map[string]any{"allocated": "9223372036854775807", "status": "FROZEN"},
	})}
	Typed(ev)
	bc := ev.GetBudgetChanged()
	if bc == nil || bc.GetNewState().GetAllocated() != 9223372036854775807 ||
		bc.GetNewState().GetStatus() != cyclesv1.BudgetStatus_BUDGET_STATUS_FROZEN || bc.GetUnit() != cyclesv1.Unit_UNIT_USD_MICROCENTS {
		t.Fatalf("decoded %v", ev)
	}

	// Lists of objects and maps, as the operator scripts store them.
	ev = &cyclesv1.Event{EventType: "reservation.quarantine_resolved", Data: data(map[string]any{
		"reservation_id": "r9", "outcome": "RELEASED", "quarantine_reason": "INVALID_EXPIRY", "reason": "ticket 7",
		"released": []any{map[string]any{"scope": "tenant:a", "amount": "9007199254740993"}}, "corrected": map[string]any{},
	})}
	Typed(ev)
	qr := ev.GetQuarantineResolved()
	if qr == nil || len(qr.GetReleased()) != 1 || qr.GetReleased()[0].GetAmount() != 9007199254740993 || qr.GetOutcome() != "RELEASED" {
		t.Fatalf("decoded %v", ev)
	}
	ev = &cyclesv1.Event{EventType: "tenant.ledger_repaired", Data: data(map[string]any{
		"changes": float64(3), "kinds": map[string]any{"INDEX_ORPHAN": float64(2), "RESERVED_MISMATCH": float64(1)},
	})}
	Typed(ev)
	lr := ev.GetLedgerRepaired()
	if lr == nil || lr.GetChanges() != 3 || lr.GetKinds()["INDEX_ORPHAN"] != 2 {
		t.Fatalf("decoded %v", ev)
	}

	// Undecodable data keeps the type and the untyped data.
	ev = &cyclesv1.Event{EventType: "budget.exhausted", Data: data(map[string]any{"remaining": "not a number"})}
	Typed(ev)
	if ev.GetType() != cyclesv1.EventType_EVENT_TYPE_BUDGET_EXHAUSTED || ev.GetPayload() != nil || ev.GetData() == nil {
		t.Fatalf("bad data: %v", ev)
	}
	// Unknown names stay UNSPECIFIED.
	ev = &cyclesv1.Event{EventType: "policy.someday"}
	Typed(ev)
	if ev.GetType() != cyclesv1.EventType_EVENT_TYPE_UNSPECIFIED {
		t.Fatalf("unknown name typed as %v", ev.GetType())
	}
}

func TestTypeFilterRejectsUnspecified(t *testing.T) {
	if _, err := typeNames([]cyclesv1.EventType{cyclesv1.EventType_EVENT_TYPE_BUDGET_FUNDED, 0}); err == nil {
		t.Fatal("UNSPECIFIED accepted as a filter")
	}
	names, err := typeNames([]cyclesv1.EventType{cyclesv1.EventType_EVENT_TYPE_BUDGET_FUNDED})
	if err != nil || len(names) != 1 || names[0] != "budget.funded" {
		t.Fatalf("%v %v", names, err)
	}
}

// TestEveryKindNamesAPayloadMember keeps the kinds table and Event's oneof
// payload in step: a name that is not a message member of the oneof would
// panic in setPayload, and every member must be reachable from some kind.
func TestEveryKindNamesAPayloadMember(t *testing.T) {
	oneof := (&cyclesv1.Event{}).ProtoReflect().Descriptor().Oneofs().ByName("payload")
	if oneof == nil {
		t.Fatal("cycles.v1.Event has no oneof payload")
	}
	used := map[string]bool{}
	for _, k := range eventKinds {
		fd := oneof.Fields().ByName(k.payload)
		if fd == nil || fd.Message() == nil {
			t.Errorf("%s: %q is not a message member of Event.payload", k.name, k.payload)
			continue
		}
		used[string(k.payload)] = true
		ev := &cyclesv1.Event{}
		got := setPayload(ev, k.payload)
		if got.ProtoReflect().Descriptor() != fd.Message() || !ev.ProtoReflect().Has(fd) {
			t.Errorf("%s: setPayload did not set %s", k.name, k.payload)
		}
	}
	for i := range oneof.Fields().Len() {
		if n := oneof.Fields().Get(i).Name(); !used[string(n)] {
			t.Errorf("Event.payload member %s is named by no event kind", n)
		}
	}
}
