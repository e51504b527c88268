package cycleshttp

import (
	"encoding/json"
	"math"
	"strconv"

	"google.golang.org/protobuf/types/known/structpb"
)

// eventIntegerFields are the members of the governance spec's EventData*
// schemas typed integer (int64): amounts, counts and durations. The ledger
// scripts write amounts into an event's data as decimal strings (a Lua number
// is a double and would round past 2^53), and the gRPC wire keeps them so in
// its proto JSON; the HTTP wire answers them as JSON integers, digit for
// digit, never through float64. A name means the same thing in every EventData
// schema that has it, so one set serves every event type; previous_state and
// new_state (EventDataBudgetLifecycle) nest the budget fields one level down.
var eventIntegerFields = map[string]bool{
	"allocated": true, "remaining": true, "debt": true, "spent": true, "reserved": true,
	"overdraft_limit": true, "debt_incurred": true, "total_debt": true,
	"requested_amount": true, "estimated_amount": true, "actual_amount": true, "overage": true,
	"released_amount": true, "ttl_ms": true, "extensions_used": true,
	"window_seconds": true, "sample_count": true,
}

// eventStateFields are the data members whose objects hold budget fields.
var eventStateFields = map[string]bool{"previous_state": true, "new_state": true}

// eventDataOf is an event's data for the HTTP wire: as stored, except that
// the spec's integer members are JSON integers (json.Number, exact) where the
// stored value is an int64 in decimal; any other value is left as it is.
func eventDataOf(s *structpb.Struct) map[string]any {
	if s == nil || len(s.GetFields()) == 0 {
		return nil
	}
	return typedObjectOf(s, true)
}

// typedObjectOf converts the members of the data object (top) or of one of
// its state objects; objects deeper down (subject, action, metadata) are the
// caller's own content and pass through as they are.
func typedObjectOf(s *structpb.Struct, top bool) map[string]any {
	out := make(map[string]any, len(s.GetFields()))
	for k, v := range s.GetFields() {
		switch {
		case eventIntegerFields[k]:
			out[k] = integerOf(v)
		case top && eventStateFields[k] && v.GetStructValue() != nil:
			out[k] = typedObjectOf(v.GetStructValue(), false)
		default:
			out[k] = dataValueOf(v)
		}
	}
	return out
}

// integerOf answers a decimal-string or integral-number int64 as a JSON
// integer; anything else unchanged.
func integerOf(v *structpb.Value) any {
	switch x := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		if n, err := strconv.ParseInt(x.StringValue, 10, 64); err == nil {
			return json.Number(strconv.FormatInt(n, 10))
		}
	case *structpb.Value_NumberValue:
		// A number in stored data went through a double already; an integral
		// one within the exact range is written without an exponent.
		if f := x.NumberValue; f == math.Trunc(f) && math.Abs(f) <= 1<<53 {
			return json.Number(strconv.FormatInt(int64(f), 10))
		}
	}
	return dataValueOf(v)
}

// dataValueOf is v as encoding/json renders it; numbers keep their shortest
// exact decimal form.
func dataValueOf(v *structpb.Value) any {
	switch x := v.GetKind().(type) {
	case *structpb.Value_NumberValue:
		f := x.NumberValue
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil
		}
		if f == math.Trunc(f) && math.Abs(f) < 1e21 {
			return json.Number(strconv.FormatFloat(f, 'f', -1, 64))
		}
		return json.Number(strconv.FormatFloat(f, 'g', -1, 64))
	case *structpb.Value_StructValue:
		m := make(map[string]any, len(x.StructValue.GetFields()))
		for k, e := range x.StructValue.GetFields() {
			m[k] = dataValueOf(e)
		}
		return m
	case *structpb.Value_ListValue:
		l := make([]any, 0, len(x.ListValue.GetValues()))
		for _, e := range x.ListValue.GetValues() {
			l = append(l, dataValueOf(e))
		}
		return l
	default:
		return v.AsInterface()
	}
}
