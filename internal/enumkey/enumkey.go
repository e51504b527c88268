// Package enumkey gives the key form of a protobuf enum value: its name
// without the enum's prefix ("TOKENS" for UNIT_TOKENS). Scripts, records and
// metric attributes carry enum values in this form.
package enumkey

import (
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// Of is e's name without its enum's prefix; "" for the zero (…_UNSPECIFIED)
// value and for a number the enum does not declare. The prefix is read off
// the zero value's name, which buf's STANDARD lint makes <ENUM>_UNSPECIFIED.
func Of(e protoreflect.Enum) string {
	n := e.Number()
	if n == 0 {
		return ""
	}
	values := e.Descriptor().Values()
	v := values.ByNumber(n)
	if v == nil {
		return ""
	}
	name := string(v.Name())
	if zero := values.ByNumber(0); zero != nil {
		name = strings.TrimPrefix(name, strings.TrimSuffix(string(zero.Name()), "UNSPECIFIED"))
	}
	return name
}
