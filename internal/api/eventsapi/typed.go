package eventsapi

import (
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
)

// eventKind ties a protocol event name to its typed enum value and the
// member of Event's payload oneof that carries its data.
type eventKind struct {
	name    string
	typ     cyclesv1.EventType
	payload protoreflect.Name // a message field of Event's oneof payload
}

// setPayload allocates ev's payload member named field (clearing any other
// member of the oneof) and returns it to be filled.
func setPayload(ev *cyclesv1.Event, field protoreflect.Name) proto.Message {
	m := ev.ProtoReflect()
	return m.Mutable(m.Descriptor().Fields().ByName(field)).Message().Interface()
}

// eventKinds lists every event the server's scripts emit (lua/; the
// EventType comments in proto/cycles/v1/event_types.proto say which
// operation emits which). TestEveryEmittedEventIsTyped keeps it complete.
var eventKinds = []eventKind{
	{"reservation.denied", cyclesv1.EventType_EVENT_TYPE_RESERVATION_DENIED, "reservation_denied"},
	{"reservation.observed_denied", cyclesv1.EventType_EVENT_TYPE_RESERVATION_OBSERVED_DENIED, "reservation_observed"},
	{"reservation.observed_allowed", cyclesv1.EventType_EVENT_TYPE_RESERVATION_OBSERVED_ALLOWED, "reservation_observed"},
	{"reservation.expired", cyclesv1.EventType_EVENT_TYPE_RESERVATION_EXPIRED, "reservation_expired"},
	{"reservation.commit_overage", cyclesv1.EventType_EVENT_TYPE_RESERVATION_COMMIT_OVERAGE, "commit_overage"},
	{"reservation.released_via_tenant_cascade", cyclesv1.EventType_EVENT_TYPE_RESERVATION_RELEASED_VIA_TENANT_CASCADE, "reservation_released"},
	{"reservation.quarantine_resolved", cyclesv1.EventType_EVENT_TYPE_RESERVATION_QUARANTINE_RESOLVED, "quarantine_resolved"},
	{"budget.created", cyclesv1.EventType_EVENT_TYPE_BUDGET_CREATED, "budget_changed"},
	{"budget.updated", cyclesv1.EventType_EVENT_TYPE_BUDGET_UPDATED, "budget_changed"},
	{"budget.funded", cyclesv1.EventType_EVENT_TYPE_BUDGET_FUNDED, "budget_changed"},
	{"budget.debited", cyclesv1.EventType_EVENT_TYPE_BUDGET_DEBITED, "budget_changed"},
	{"budget.reset", cyclesv1.EventType_EVENT_TYPE_BUDGET_RESET, "budget_changed"},
	{"budget.reset_spent", cyclesv1.EventType_EVENT_TYPE_BUDGET_RESET_SPENT, "budget_changed"},
	{"budget.debt_repaid", cyclesv1.EventType_EVENT_TYPE_BUDGET_DEBT_REPAID, "budget_changed"},
	{"budget.frozen", cyclesv1.EventType_EVENT_TYPE_BUDGET_FROZEN, "budget_changed"},
	{"budget.unfrozen", cyclesv1.EventType_EVENT_TYPE_BUDGET_UNFROZEN, "budget_changed"},
	{"budget.closed", cyclesv1.EventType_EVENT_TYPE_BUDGET_CLOSED, "budget_changed"},
	{"budget.exhausted", cyclesv1.EventType_EVENT_TYPE_BUDGET_EXHAUSTED, "budget_exhausted"},
	{"budget.over_limit_entered", cyclesv1.EventType_EVENT_TYPE_BUDGET_OVER_LIMIT_ENTERED, "budget_over_limit"},
	{"budget.over_limit_exited", cyclesv1.EventType_EVENT_TYPE_BUDGET_OVER_LIMIT_EXITED, "budget_over_limit"},
	{"budget.debt_incurred", cyclesv1.EventType_EVENT_TYPE_BUDGET_DEBT_INCURRED, "budget_debt_incurred"},
	{"tenant.created", cyclesv1.EventType_EVENT_TYPE_TENANT_CREATED, "tenant_changed"},
	{"tenant.updated", cyclesv1.EventType_EVENT_TYPE_TENANT_UPDATED, "tenant_changed"},
	{"tenant.suspended", cyclesv1.EventType_EVENT_TYPE_TENANT_SUSPENDED, "tenant_changed"},
	{"tenant.reactivated", cyclesv1.EventType_EVENT_TYPE_TENANT_REACTIVATED, "tenant_changed"},
	{"tenant.closed", cyclesv1.EventType_EVENT_TYPE_TENANT_CLOSED, "tenant_changed"},
	{"tenant.ledger_repaired", cyclesv1.EventType_EVENT_TYPE_TENANT_LEDGER_REPAIRED, "ledger_repaired"},
	{"api_key.created", cyclesv1.EventType_EVENT_TYPE_API_KEY_CREATED, "api_key_changed"},
	{"api_key.revoked", cyclesv1.EventType_EVENT_TYPE_API_KEY_REVOKED, "api_key_changed"},
	{"api_key.permissions_changed", cyclesv1.EventType_EVENT_TYPE_API_KEY_PERMISSIONS_CHANGED, "api_key_changed"},
	{"policy.created", cyclesv1.EventType_EVENT_TYPE_POLICY_CREATED, "policy_changed"},
	{"policy.updated", cyclesv1.EventType_EVENT_TYPE_POLICY_UPDATED, "policy_changed"},
	{"quota.threshold_approaching", cyclesv1.EventType_EVENT_TYPE_QUOTA_THRESHOLD_APPROACHING, "quota_threshold_approaching"},
	{"quota.counter_reset", cyclesv1.EventType_EVENT_TYPE_QUOTA_COUNTER_RESET, "quota_counter_reset"},
}

// kindByName finds the kind of a protocol event name.
func kindByName(name string) (eventKind, bool) {
	for _, k := range eventKinds {
		if k.name == name {
			return k, true
		}
	}
	return eventKind{}, false
}

// TypeName is the protocol event name of t ("" for UNSPECIFIED or unknown).
func TypeName(t cyclesv1.EventType) string {
	for _, k := range eventKinds {
		if k.typ == t {
			return k.name
		}
	}
	return ""
}

// typeNames turns a typed filter into the protocol names the event service
// filters on.
func typeNames(types []cyclesv1.EventType) ([]string, error) {
	names := make([]string, 0, len(types))
	for i, t := range types {
		n := TypeName(t)
		if n == "" {
			return nil, apierr.Invalid(fmt.Sprintf("types[%d]", i), "%s is not an event type", t)
		}
		names = append(names, n)
	}
	return names, nil
}

// Typed fills ev.Type and ev.Payload from the stored name and data. It is
// the one conversion from the stored form (strings, decimal-string amounts)
// to the typed form; an event whose data does not decode keeps its type and
// the untyped data, so the log stays readable.
func Typed(ev *cyclesv1.Event) {
	k, ok := kindByName(ev.GetEventType())
	if !ok {
		return
	}
	ev.Type = k.typ
	if ev.GetData() == nil {
		return
	}
	msg := setPayload(ev, k.payload)
	if err := decodePayload(ev.GetData(), msg); err != nil {
		ev.Payload = nil
	}
}

var payloadJSON = protojson.UnmarshalOptions{DiscardUnknown: true}

// decodePayload decodes the stored data into msg. The stored data writes
// enums without their prefix ("TOKENS"), amounts as decimal strings, times
// as JSON numbers and an empty Lua list as {}; normalize rewrites those into
// protojson's forms so no int64 passes through a float.
func decodePayload(data *structpb.Struct, msg proto.Message) error {
	fixed := normalize(data, msg.ProtoReflect().Descriptor())
	raw, err := protojson.Marshal(fixed)
	if err != nil {
		return err
	}
	return payloadJSON.Unmarshal(raw, msg)
}

func normalize(s *structpb.Struct, md protoreflect.MessageDescriptor) *structpb.Struct {
	out := &structpb.Struct{Fields: make(map[string]*structpb.Value, len(s.GetFields()))}
	for name, v := range s.GetFields() {
		fd := md.Fields().ByName(protoreflect.Name(name))
		if fd == nil {
			continue
		}
		out.Fields[name] = normalizeValue(v, fd)
	}
	return out
}

func normalizeValue(v *structpb.Value, fd protoreflect.FieldDescriptor) *structpb.Value {
	if fd.IsList() {
		if _, empty := v.GetKind().(*structpb.Value_StructValue); empty && len(v.GetStructValue().GetFields()) == 0 {
			return structpb.NewListValue(&structpb.ListValue{})
		}
		list := v.GetListValue()
		if list == nil {
			return v
		}
		out := &structpb.ListValue{Values: make([]*structpb.Value, len(list.GetValues()))}
		for i, item := range list.GetValues() {
			out.Values[i] = normalizeScalar(item, fd)
		}
		return structpb.NewListValue(out)
	}
	if fd.IsMap() {
		return v
	}
	return normalizeScalar(v, fd)
}

// normalizeScalar normalizes one value (or one list element) of fd's kind.
func normalizeScalar(v *structpb.Value, fd protoreflect.FieldDescriptor) *structpb.Value {
	switch fd.Kind() {
	case protoreflect.EnumKind:
		if str, ok := v.GetKind().(*structpb.Value_StringValue); ok {
			return structpb.NewStringValue(enumName(fd.Enum(), str.StringValue))
		}
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
		protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		if n, ok := v.GetKind().(*structpb.Value_NumberValue); ok {
			// Integral JSON numbers (times, counts) as exact decimal strings.
			return structpb.NewStringValue(strconv.FormatFloat(n.NumberValue, 'f', -1, 64))
		}
	case protoreflect.MessageKind:
		if st, ok := v.GetKind().(*structpb.Value_StructValue); ok {
			switch fd.Message().FullName() {
			case "google.protobuf.Struct", "google.protobuf.Value":
				return v
			}
			return structpb.NewStructValue(normalize(st.StructValue, fd.Message()))
		}
	}
	return v
}

// enumName maps a stored enum word ("TOKENS") to its proto name
// ("UNIT_TOKENS"): the enum's prefix is its zero value's name minus
// "UNSPECIFIED". A word that is already a full name, or unknown, is kept
// (protojson then rejects it and the event stays untyped).
func enumName(ed protoreflect.EnumDescriptor, word string) string {
	prefix := strings.TrimSuffix(string(ed.Values().ByNumber(0).Name()), "UNSPECIFIED")
	if ed.Values().ByName(protoreflect.Name(word)) != nil {
		return word
	}
	if full := prefix + word; ed.Values().ByName(protoreflect.Name(full)) != nil {
		return full
	}
	// v0.1.26 wire enums are lower case ("per_run", "external_side_effect").
	if full := prefix + strings.ToUpper(word); ed.Values().ByName(protoreflect.Name(full)) != nil {
		return full
	}
	return word
}
