package cycleshttp

import (
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// The protocol spells enum values without the proto prefix ("TOKENS", not
// "UNIT_TOKENS"): bodies and parameters read them by enumByName, answers
// write them by enumName (shape.go); an unknown spelling is INVALID_REQUEST
// naming the field, never a silent default.

// lowerEnums are spelled in lower case on the wire: the v0.1.26 action
// governance extension writes windows and risk classes so ("per_run",
// "read_only"). Any other spelling of them is refused.
var lowerEnums = map[protoreflect.FullName]bool{
	"cycles.v1.ActionQuotaWindow": true,
	"cycles.v1.ActionRiskClass":   true,
}

// enumByName is the value of ed whose wire name is s; ok is false for an
// unknown name and for UNSPECIFIED. Bodies and parameters read enums here.
func enumByName(ed protoreflect.EnumDescriptor, s string) (protoreflect.EnumNumber, bool) {
	if lowerEnums[ed.FullName()] {
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
