package protowire

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"

	"google.golang.org/protobuf/types/known/structpb"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
)

// integerStruct is a Struct field's value as its WireMember declares it
// (integers, integer_objects): exact JSON integers where the value is an int64
// in decimal, any other value left as it is, never through float64 for them.
func integerStruct(s *structpb.Struct, w *cyclesv1.WireMember) map[string]any {
	return typedObjectOf(s, w.GetIntegers(), w.GetIntegerObjects())
}

// typedObjectOf converts the members of the object (and, one level down,
// of the objects named in objects); objects deeper down (an event's subject,
// action, metadata) are the caller's own content and pass through as they are.
func typedObjectOf(s *structpb.Struct, ints, objects []string) map[string]any {
	out := make(map[string]any, len(s.GetFields()))
	for k, v := range s.GetFields() {
		switch {
		case slices.Contains(ints, k):
			out[k] = integerOf(v)
		case slices.Contains(objects, k) && v.GetStructValue() != nil:
			out[k] = typedObjectOf(v.GetStructValue(), ints, nil)
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
