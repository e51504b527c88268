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
// payload member that carries its data.
type eventKind struct {
	name    string
	typ     cyclesv1.EventType
	payload func(ev *cyclesv1.Event) proto.Message // allocates and sets the member
}

func reservationDenied(ev *cyclesv1.Event) proto.Message {
	m := &cyclesv1.ReservationDenied{}
	ev.Payload = &cyclesv1.Event_ReservationDenied{ReservationDenied: m}
	return m
}

func reservationObserved(ev *cyclesv1.Event) proto.Message {
	m := &cyclesv1.ReservationObserved{}
	ev.Payload = &cyclesv1.Event_ReservationObserved{ReservationObserved: m}
	return m
}

func reservationExpired(ev *cyclesv1.Event) proto.Message {
	m := &cyclesv1.ReservationExpired{}
	ev.Payload = &cyclesv1.Event_ReservationExpired{ReservationExpired: m}
	return m
}

func commitOverage(ev *cyclesv1.Event) proto.Message {
	m := &cyclesv1.CommitOverage{}
	ev.Payload = &cyclesv1.Event_CommitOverage{CommitOverage: m}
	return m
}

func reservationReleased(ev *cyclesv1.Event) proto.Message {
	m := &cyclesv1.ReservationReleased{}
	ev.Payload = &cyclesv1.Event_ReservationReleased{ReservationReleased: m}
	return m
}

func budgetChanged(ev *cyclesv1.Event) proto.Message {
	m := &cyclesv1.BudgetChanged{}
	ev.Payload = &cyclesv1.Event_BudgetChanged{BudgetChanged: m}
	return m
}

func budgetExhausted(ev *cyclesv1.Event) proto.Message {
	m := &cyclesv1.BudgetExhausted{}
	ev.Payload = &cyclesv1.Event_BudgetExhausted{BudgetExhausted: m}
	return m
}

func budgetOverLimit(ev *cyclesv1.Event) proto.Message {
	m := &cyclesv1.BudgetOverLimit{}
	ev.Payload = &cyclesv1.Event_BudgetOverLimit{BudgetOverLimit: m}
	return m
}

func budgetDebtIncurred(ev *cyclesv1.Event) proto.Message {
	m := &cyclesv1.BudgetDebtIncurred{}
	ev.Payload = &cyclesv1.Event_BudgetDebtIncurred{BudgetDebtIncurred: m}
	return m
}

func tenantChanged(ev *cyclesv1.Event) proto.Message {
	m := &cyclesv1.TenantChanged{}
	ev.Payload = &cyclesv1.Event_TenantChanged{TenantChanged: m}
	return m
}

func apiKeyChanged(ev *cyclesv1.Event) proto.Message {
	m := &cyclesv1.ApiKeyChanged{}
	ev.Payload = &cyclesv1.Event_ApiKeyChanged{ApiKeyChanged: m}
	return m
}

func policyChanged(ev *cyclesv1.Event) proto.Message {
	m := &cyclesv1.PolicyChanged{}
	ev.Payload = &cyclesv1.Event_PolicyChanged{PolicyChanged: m}
	return m
}

func quarantineResolved(ev *cyclesv1.Event) proto.Message {
	m := &cyclesv1.QuarantineResolved{}
	ev.Payload = &cyclesv1.Event_QuarantineResolved{QuarantineResolved: m}
	return m
}

func ledgerRepaired(ev *cyclesv1.Event) proto.Message {
	m := &cyclesv1.LedgerRepaired{}
	ev.Payload = &cyclesv1.Event_LedgerRepaired{LedgerRepaired: m}
	return m
}

func quotaThresholdApproaching(ev *cyclesv1.Event) proto.Message {
	m := &cyclesv1.QuotaThresholdApproaching{}
	ev.Payload = &cyclesv1.Event_QuotaThresholdApproaching{QuotaThresholdApproaching: m}
	return m
}

func quotaCounterReset(ev *cyclesv1.Event) proto.Message {
	m := &cyclesv1.QuotaCounterReset{}
	ev.Payload = &cyclesv1.Event_QuotaCounterReset{QuotaCounterReset: m}
	return m
}

// eventKinds lists every event the server's scripts emit (lua/; the
// EventType comments in proto/cycles/v1/event_types.proto say which
// operation emits which). TestEveryEmittedEventIsTyped keeps it complete.
var eventKinds = []eventKind{
	{"reservation.denied", cyclesv1.EventType_EVENT_TYPE_RESERVATION_DENIED, reservationDenied},
	{"reservation.observed_denied", cyclesv1.EventType_EVENT_TYPE_RESERVATION_OBSERVED_DENIED, reservationObserved},
	{"reservation.observed_allowed", cyclesv1.EventType_EVENT_TYPE_RESERVATION_OBSERVED_ALLOWED, reservationObserved},
	{"reservation.expired", cyclesv1.EventType_EVENT_TYPE_RESERVATION_EXPIRED, reservationExpired},
	{"reservation.commit_overage", cyclesv1.EventType_EVENT_TYPE_RESERVATION_COMMIT_OVERAGE, commitOverage},
	{"reservation.released_via_tenant_cascade", cyclesv1.EventType_EVENT_TYPE_RESERVATION_RELEASED_VIA_TENANT_CASCADE, reservationReleased},
	{"reservation.quarantine_resolved", cyclesv1.EventType_EVENT_TYPE_RESERVATION_QUARANTINE_RESOLVED, quarantineResolved},
	{"budget.created", cyclesv1.EventType_EVENT_TYPE_BUDGET_CREATED, budgetChanged},
	{"budget.updated", cyclesv1.EventType_EVENT_TYPE_BUDGET_UPDATED, budgetChanged},
	{"budget.funded", cyclesv1.EventType_EVENT_TYPE_BUDGET_FUNDED, budgetChanged},
	{"budget.debited", cyclesv1.EventType_EVENT_TYPE_BUDGET_DEBITED, budgetChanged},
	{"budget.reset", cyclesv1.EventType_EVENT_TYPE_BUDGET_RESET, budgetChanged},
	{"budget.reset_spent", cyclesv1.EventType_EVENT_TYPE_BUDGET_RESET_SPENT, budgetChanged},
	{"budget.debt_repaid", cyclesv1.EventType_EVENT_TYPE_BUDGET_DEBT_REPAID, budgetChanged},
	{"budget.frozen", cyclesv1.EventType_EVENT_TYPE_BUDGET_FROZEN, budgetChanged},
	{"budget.unfrozen", cyclesv1.EventType_EVENT_TYPE_BUDGET_UNFROZEN, budgetChanged},
	{"budget.closed", cyclesv1.EventType_EVENT_TYPE_BUDGET_CLOSED, budgetChanged},
	{"budget.exhausted", cyclesv1.EventType_EVENT_TYPE_BUDGET_EXHAUSTED, budgetExhausted},
	{"budget.over_limit_entered", cyclesv1.EventType_EVENT_TYPE_BUDGET_OVER_LIMIT_ENTERED, budgetOverLimit},
	{"budget.over_limit_exited", cyclesv1.EventType_EVENT_TYPE_BUDGET_OVER_LIMIT_EXITED, budgetOverLimit},
	{"budget.debt_incurred", cyclesv1.EventType_EVENT_TYPE_BUDGET_DEBT_INCURRED, budgetDebtIncurred},
	{"tenant.created", cyclesv1.EventType_EVENT_TYPE_TENANT_CREATED, tenantChanged},
	{"tenant.updated", cyclesv1.EventType_EVENT_TYPE_TENANT_UPDATED, tenantChanged},
	{"tenant.suspended", cyclesv1.EventType_EVENT_TYPE_TENANT_SUSPENDED, tenantChanged},
	{"tenant.reactivated", cyclesv1.EventType_EVENT_TYPE_TENANT_REACTIVATED, tenantChanged},
	{"tenant.closed", cyclesv1.EventType_EVENT_TYPE_TENANT_CLOSED, tenantChanged},
	{"tenant.ledger_repaired", cyclesv1.EventType_EVENT_TYPE_TENANT_LEDGER_REPAIRED, ledgerRepaired},
	{"api_key.created", cyclesv1.EventType_EVENT_TYPE_API_KEY_CREATED, apiKeyChanged},
	{"api_key.revoked", cyclesv1.EventType_EVENT_TYPE_API_KEY_REVOKED, apiKeyChanged},
	{"api_key.permissions_changed", cyclesv1.EventType_EVENT_TYPE_API_KEY_PERMISSIONS_CHANGED, apiKeyChanged},
	{"policy.created", cyclesv1.EventType_EVENT_TYPE_POLICY_CREATED, policyChanged},
	{"policy.updated", cyclesv1.EventType_EVENT_TYPE_POLICY_UPDATED, policyChanged},
	{"quota.threshold_approaching", cyclesv1.EventType_EVENT_TYPE_QUOTA_THRESHOLD_APPROACHING, quotaThresholdApproaching},
	{"quota.counter_reset", cyclesv1.EventType_EVENT_TYPE_QUOTA_COUNTER_RESET, quotaCounterReset},
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
	msg := k.payload(ev)
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
