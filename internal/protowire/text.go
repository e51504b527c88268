package protowire

import (
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
)

// The protocol spells enum values without the proto prefix ("TOKENS", not
// "UNIT_TOKENS"): bodies and parameters read them by EnumByName, answers
// write them by EnumName (shape.go); an unknown spelling is INVALID_REQUEST
// naming the field, never a silent default.

// lowerCase: the enum's wire_enum option spells its values in lower case
// (the v0.1.26 action governance extension writes windows and risk classes
// so: "per_run", "read_only"); any other spelling of them is refused.
func lowerCase(ed protoreflect.EnumDescriptor) bool {
	we, _ := proto.GetExtension(ed.Options(), cyclesv1.E_WireEnum).(*cyclesv1.WireEnum)
	return we.GetLowerCase()
}

// EnumByName is the value of ed whose wire name is s; ok is false for an
// unknown name and for UNSPECIFIED. Bodies and parameters read enums here.
func EnumByName(ed protoreflect.EnumDescriptor, s string) (protoreflect.EnumNumber, bool) {
	if lowerCase(ed) {
		if s != strings.ToLower(s) {
			return 0, false
		}
		s = strings.ToUpper(s)
	}
	vd := ed.Values().ByName(protoreflect.Name(enumPrefix(ed) + s))
	if vd == nil || vd.Number() == 0 {
		return 0, false
	}
	return vd.Number(), true
}

// enumPrefix is the prefix of an enum's value names: its UNSPECIFIED value's
// name without "UNSPECIFIED" ("UNIT_" of UNIT_UNSPECIFIED).
func enumPrefix(ed protoreflect.EnumDescriptor) string {
	return strings.TrimSuffix(string(ed.Values().ByNumber(0).Name()), "UNSPECIFIED")
}

// ISOTime is an instant in ms as the wire writes it: ISO 8601 in UTC,
// milliseconds precise; "" for 0 (unset).
func ISOTime(ms int64) string {
	if ms == 0 {
		return ""
	}
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z")
}

// EnumName is v's wire name (EnumNames); "" for UNSPECIFIED or a number
// the enum does not know.
func EnumName(ed protoreflect.EnumDescriptor, v protoreflect.EnumNumber) string {
	vd := ed.Values().ByNumber(v)
	if v == 0 || vd == nil {
		return ""
	}
	name := strings.TrimPrefix(string(vd.Name()), enumPrefix(ed))
	if lowerCase(ed) {
		return strings.ToLower(name)
	}
	return name
}

// ParseText reads a value of field fd from its text (a query parameter):
// strings as they are, enums by their wire name, booleans true/false,
// integers in range, an int64 *_ms field as an ISO 8601 date-time. name is
// what a refusal names.
func ParseText(fd protoreflect.FieldDescriptor, name, s string) (protoreflect.Value, error) {
	switch fd.Kind() {
	case protoreflect.EnumKind:
		n, ok := EnumByName(fd.Enum(), s)
		if !ok {
			return protoreflect.Value{}, apierr.Invalid(name, "unknown value %q", s)
		}
		return protoreflect.ValueOfEnum(n), nil
	case protoreflect.BoolKind:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return protoreflect.Value{}, apierr.Invalid(name, "must be true or false, got %q", s)
		}
		return protoreflect.ValueOfBool(b), nil
	case protoreflect.Int32Kind:
		n, err := strconv.ParseInt(s, 10, 32)
		if err != nil {
			return protoreflect.Value{}, apierr.Invalid(name, "must be an integer, got %q", s)
		}
		return protoreflect.ValueOfInt32(int32(n)), nil
	case protoreflect.Int64Kind: // the *_ms fields: an ISO 8601 date-time
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return protoreflect.Value{}, apierr.Invalid(name, "must be an ISO 8601 date-time (e.g. 2026-01-02T15:04:05Z), got %q", s)
		}
		return protoreflect.ValueOfInt64(t.UnixMilli()), nil
	}
	return protoreflect.ValueOfString(s), nil
}
