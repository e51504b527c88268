package cycleshttp

import (
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
)

// The protocol spells enum values without the proto prefix ("TOKENS", not
// "UNIT_TOKENS"). These tables translate both ways; an unknown spelling is
// INVALID_REQUEST naming the field, never a silent default.

var (
	unitNames    = enumNames(cyclesv1.Unit(0).Descriptor())
	unitValues   = enumValues(unitNames)
	policyNames  = enumNames(cyclesv1.CommitOveragePolicy(0).Descriptor())
	policyValues = enumValues(policyNames)
)

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

// enumNames is an enum's wire spelling by number (UNSPECIFIED has none).
func enumNames(ed protoreflect.EnumDescriptor) map[int32]string {
	vs, prefix := ed.Values(), enumPrefix(ed)
	out := make(map[int32]string, vs.Len())
	for i := range vs.Len() {
		if v := vs.Get(i); v.Number() != 0 {
			out[int32(v.Number())] = strings.TrimPrefix(string(v.Name()), prefix)
		}
	}
	return out
}

func enumValues(names map[int32]string) map[string]int32 {
	out := make(map[string]int32, len(names))
	for v, n := range names {
		out[n] = v
	}
	return out
}

func parseEnum(field, s string, values map[string]int32) (int32, error) {
	if v, ok := values[s]; ok {
		return v, nil
	}
	return 0, apierr.Invalid(field, "unknown value %q", s)
}

func unitName(u cyclesv1.Unit) string { return unitNames[int32(u)] }
