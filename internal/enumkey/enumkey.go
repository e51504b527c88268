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

// Value is a generated protobuf enum type.
type Value interface {
	~int32
	protoreflect.Enum
}

// Parse is the inverse of Of: the value of E whose key is key; ok is false
// for "", for UNSPECIFIED and for a key E does not declare.
func Parse[E Value](key string) (value E, ok bool) {
	var zero E
	values := zero.Descriptor().Values()
	prefix := ""
	if z := values.ByNumber(0); z != nil {
		prefix = strings.TrimSuffix(string(z.Name()), "UNSPECIFIED")
	}
	v := values.ByName(protoreflect.Name(prefix + key))
	if key == "" || v == nil || v.Number() == 0 {
		return zero, false
	}
	return E(v.Number()), true
}
