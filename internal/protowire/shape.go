package protowire

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
)

// Answers are written by one generic encoder from a declared shape, not by a
// hand-written type each. The wire's rules are declared here once:
//   - a member is named for its proto field (snake_case);
//   - "wire=field" renames (the spec's name is not the field's); a field may
//     be a path through singular messages ("api_key.key_id");
//   - a member "x" read from an int64 field "x_ms" is that instant as an
//     ISO 8601 date-time in UTC, milliseconds precise ("" when 0);
//   - "wire=field:unit" writes the bare int64 field as the spec's amount
//     object, {"unit": <the enum at path unit>, "amount": n}: the admin
//     protos carry a budget's amounts as integers in its one unit;
//   - a trailing "?" omits the member when it is zero, empty or unset;
//     without it the member is always written (lists as [], never null; an
//     unset message as its zero value);
//   - an enum is its value's name without the enum's prefix ("UNIT_TOKENS"
//     is "TOKENS"; UNSPECIFIED is "");
//   - an integer is written exactly (int64 never passes through float64);
//   - a map is an object with sorted keys; a google.protobuf.Struct is its
//     free-form object; strings are escaped as encoding/json escapes them.
// What the proto does not carry is declared beside the member: a constant
// (fixed) or a value computed from the message (calc), each saying why.

// Shape is a message's wire members, in wire order.
type Shape struct {
	at      []protoreflect.Name // the shape is of the message at this path
	members []member
}

type member struct {
	wire string
	path []protoreflect.Name // the field, through singular messages
	unit []protoreflect.Name // set: an amount object in the unit at this path
	omit bool
	// A message member is written by each (a hand-written type) or in sub.
	each func(protoreflect.Message) any
	sub  *Shape
	// fixed is the member's constant value, for a spec member the proto does
	// not carry (what cyclesd never has, such as webhook counts).
	fixed json.RawMessage
	// Calc computes the member from the whole message (false: omitted).
	calc func(protoreflect.Message) (any, bool)
}

// ShapeOf declares a shape: each spec is "wire[=field][:unit][?]" (see the
// rules above). Fields are checked by Check (its user runs it once, when
// its declarations are built).
func ShapeOf(specs ...string) *Shape {
	s := &Shape{}
	for _, spec := range specs {
		m := member{}
		spec, m.omit = strings.CutSuffix(spec, "?")
		spec, unit, isAmount := strings.Cut(spec, ":")
		wire, field, renamed := strings.Cut(spec, "=")
		if !renamed {
			field = wire
		}
		m.wire, m.path = wire, Path(field)
		if isAmount {
			m.unit = Path(unit)
		}
		s.members = append(s.members, m)
	}
	return s
}

func Path(dotted string) []protoreflect.Name {
	var out []protoreflect.Name
	for _, n := range strings.Split(dotted, ".") {
		out = append(out, protoreflect.Name(n))
	}
	return out
}

// Of is s written from the message at field path dotted (a response that
// wraps the one resource it answers: {"tenant": {...}}).
func (s *Shape) Of(dotted string) *Shape {
	c := *s
	c.at = append(Path(dotted), s.at...)
	return &c
}

// Calc computes the member named wire from the message.
func (s *Shape) Calc(wire string, f func(protoreflect.Message) (any, bool)) *Shape {
	return s.set(wire, func(mb *member) { mb.calc = f })
}

// set changes the member named wire; a name the shape lacks is a
// declaration error, found when the shape is declared.
func (s *Shape) set(wire string, f func(*member)) *Shape {
	for i := range s.members {
		if s.members[i].wire == wire {
			f(&s.members[i])
			return s
		}
	}
	panic("protowire: shape has no member " + wire)
}

// With writes the message members named wire with each (a hand-written
// type where the item's shape differs from its proto).
func (s *Shape) With(wire string, each func(protoreflect.Message) any) *Shape {
	return s.set(wire, func(mb *member) { mb.each = each })
}

// Nest writes the message members named wire in shape sub.
func (s *Shape) Nest(wire string, sub *Shape) *Shape {
	return s.set(wire, func(mb *member) { mb.sub = sub })
}

// Without is s less the member named wire (an answer that carries it only
// in some cases).
func (s *Shape) Without(wire string) *Shape {
	c := *s
	c.members = slices.DeleteFunc(slices.Clone(s.members), func(mb member) bool { return mb.wire == wire })
	if len(c.members) == len(s.members) {
		panic("protowire: shape has no member " + wire)
	}
	return &c
}

// Fixed writes the member named wire as the constant value raw (JSON).
func (s *Shape) Fixed(wire, raw string) *Shape {
	return s.set(wire, func(mb *member) { mb.fixed = json.RawMessage(raw) })
}

// Item adapts a hand-written item encoder to Shape.With.
func Item[M proto.Message, O any](f func(M) O) func(protoreflect.Message) any {
	return func(m protoreflect.Message) any { return f(m.Interface().(M)) }
}

// JSON is m written in shape s (its message members in their own nested
// shapes: Shapes.Write writes those in their types' shapes).
func (s *Shape) JSON(m protoreflect.Message) json.RawMessage {
	var buf bytes.Buffer
	s.write(&buf, m, nil)
	return buf.Bytes()
}

// Descend is the message at path below m (an empty one where a message on
// the way is unset).
func Descend(m protoreflect.Message, path []protoreflect.Name) protoreflect.Message {
	for _, n := range path {
		m = m.Get(m.Descriptor().Fields().ByName(n)).Message()
	}
	return m
}

// fieldOf is the field at path below md (and the message holding it), and
// whether it is an instant written as an ISO date-time (member "x" from
// int64 field "x_ms"). A path naming no field panics: declaration error.
func fieldOf(md protoreflect.MessageDescriptor, path []protoreflect.Name) (protoreflect.FieldDescriptor, bool) {
	for i, n := range path {
		fields := md.Fields()
		fd := fields.ByName(n)
		if fd == nil && i == len(path)-1 {
			if fd = fields.ByName(n + "_ms"); fd != nil && fd.Kind() == protoreflect.Int64Kind {
				return fd, true
			}
		}
		if fd == nil || (i < len(path)-1 && (fd.Message() == nil || fd.IsList() || fd.IsMap())) {
			panic("protowire: " + string(md.FullName()) + " has no field " + string(n))
		}
		if i == len(path)-1 {
			return fd, false
		}
		md = fd.Message()
	}
	panic("protowire: empty field path")
}

// Check walks s (and its nested shapes) against md.
func (s *Shape) Check(md protoreflect.MessageDescriptor) { (*Shapes)(nil).check(s, md) }

// Shapes are the shapes of messages by type: a message member without a
// nested shape of its own is written in its type's. A type declared none
// (For) has a default one, made by Prepare:
//   - a message of one singular message field is that message's answer
//     (a response wrapping the resource it answers);
//   - any other is its fields in proto order, each named and omitted as its
//     (cycles.v1.wire) option says (name, omit_empty).
type Shapes struct {
	by      map[protoreflect.FullName]*Shape
	checked map[protoreflect.FullName]bool
}

// NewShapes is a set with no declared shape.
func NewShapes() *Shapes {
	return &Shapes{by: map[protoreflect.FullName]*Shape{}, checked: map[protoreflect.FullName]bool{}}
}

// For declares s as the shape of messages of m's type.
func (set *Shapes) For(m proto.Message, s *Shape) *Shapes {
	set.by[m.ProtoReflect().Descriptor().FullName()] = s
	return set
}

// Prepare is md's shape, made (for md and every message type below it) and
// checked against md; a shape naming no field panics here. It writes set,
// so it runs before any Write.
func (set *Shapes) Prepare(md protoreflect.MessageDescriptor) *Shape {
	s, ok := set.by[md.FullName()]
	if set.checked[md.FullName()] {
		return s
	}
	set.checked[md.FullName()] = true
	fields := md.Fields()
	switch fd := fields.Get(0); {
	case ok:
	case fields.Len() == 1 && fd.Message() != nil && fd.Cardinality() != protoreflect.Repeated && !isStruct(fd):
		s = set.Prepare(fd.Message()).Of(string(fd.Name()))
	default:
		var specs []string
		for i := 0; i < fields.Len(); i++ {
			fd := fields.Get(i)
			spec := string(fd.Name())
			w, _ := proto.GetExtension(fd.Options(), cyclesv1.E_Wire).(*cyclesv1.WireMember)
			if n := w.GetName(); n+"_ms" == spec {
				spec = n // the member x of x_ms: the instant as a date-time
			} else if n != "" {
				spec = n + "=" + spec
			}
			if w.GetOmitEmpty() {
				spec += "?"
			}
			specs = append(specs, spec)
		}
		s = ShapeOf(specs...)
	}
	set.by[md.FullName()] = s
	set.check(s, md)
	return s
}

// Write is m in s, or in its type's shape (Prepare made it) when s is nil.
func (set *Shapes) Write(s *Shape, m protoreflect.Message) json.RawMessage {
	if s == nil {
		s = set.by[m.Descriptor().FullName()]
	}
	var buf bytes.Buffer
	s.write(&buf, m, set)
	return buf.Bytes()
}

// check walks s against md, preparing the types of its message members
// that have no nested shape (set nil: they must have one).
func (set *Shapes) check(s *Shape, md protoreflect.MessageDescriptor) {
	for _, n := range s.at {
		md = md.Fields().ByName(n).Message()
	}
	for _, mb := range s.members {
		if mb.fixed != nil || mb.calc != nil {
			continue
		}
		fd, _ := fieldOf(md, mb.path)
		if mb.unit != nil {
			fieldOf(md, mb.unit)
		}
		switch {
		case mb.sub != nil:
			set.check(mb.sub, fd.Message())
		case set != nil && mb.each == nil && fd.Message() != nil && !fd.IsMap() && !isStruct(fd):
			set.Prepare(fd.Message())
		}
	}
}

func (s *Shape) write(buf *bytes.Buffer, m protoreflect.Message, set *Shapes) {
	m = Descend(m, s.at)
	buf.WriteByte('{')
	first := true
	key := func(wire string) {
		if !first {
			buf.WriteByte(',')
		}
		first = false
		writeString(buf, wire)
		buf.WriteByte(':')
	}
	for _, mb := range s.members {
		if mb.fixed != nil {
			key(mb.wire)
			buf.Write(mb.fixed)
			continue
		}
		if mb.calc != nil {
			if v, ok := mb.calc(m); ok {
				key(mb.wire)
				writeAny(buf, v)
			}
			continue
		}
		fd, iso := fieldOf(m.Descriptor(), mb.path)
		owner := Descend(m, mb.path[:len(mb.path)-1])
		v := owner.Get(fd)
		empty := !owner.Has(fd) || (iso && v.Int() == 0) || (isStruct(fd) && len(v.Message().Interface().(*structpb.Struct).GetFields()) == 0)
		if mb.omit && empty {
			continue
		}
		key(mb.wire)
		switch {
		case mb.unit != nil:
			ufd, _ := fieldOf(m.Descriptor(), mb.unit)
			buf.WriteString(`{"unit":`)
			writeString(buf, EnumName(ufd.Enum(), Descend(m, mb.unit[:len(mb.unit)-1]).Get(ufd).Enum()))
			buf.WriteString(`,"amount":` + strconv.FormatInt(v.Int(), 10) + "}")
		case iso:
			writeString(buf, ISOTime(v.Int()))
		case fd.IsList():
			l := v.List()
			buf.WriteByte('[')
			for i := 0; i < l.Len(); i++ {
				if i > 0 {
					buf.WriteByte(',')
				}
				writeValue(buf, fd, l.Get(i), mb, set)
			}
			buf.WriteByte(']')
		case fd.IsMap():
			writeMap(buf, fd, v.Map())
		default:
			writeValue(buf, fd, v, mb, set)
		}
	}
	buf.WriteByte('}')
}

func isStruct(fd protoreflect.FieldDescriptor) bool {
	return fd.Message() != nil && fd.Message().FullName() == "google.protobuf.Struct" && !fd.IsList() && !fd.IsMap()
}

// writeAny writes a hand-built value (a calc result, an each item).
func writeAny(buf *bytes.Buffer, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic("protowire: " + err.Error()) // hand-built wire values always encode
	}
	buf.Write(b)
}

func writeValue(buf *bytes.Buffer, fd protoreflect.FieldDescriptor, v protoreflect.Value, mb member, set *Shapes) {
	switch fd.Kind() {
	case protoreflect.StringKind:
		writeString(buf, v.String())
	case protoreflect.BoolKind:
		buf.WriteString(strconv.FormatBool(v.Bool()))
	case protoreflect.Int32Kind, protoreflect.Int64Kind, protoreflect.Sint32Kind, protoreflect.Sint64Kind:
		buf.WriteString(strconv.FormatInt(v.Int(), 10))
	case protoreflect.Uint32Kind, protoreflect.Uint64Kind:
		buf.WriteString(strconv.FormatUint(v.Uint(), 10))
	case protoreflect.EnumKind:
		writeString(buf, EnumName(fd.Enum(), v.Enum()))
	case protoreflect.DoubleKind: // ratios (threshold_pct), never money
		writeAny(buf, v.Float())
	case protoreflect.MessageKind:
		if mb.each != nil {
			writeAny(buf, mb.each(v.Message()))
			return
		}
		if fd.Message().FullName() == "google.protobuf.Struct" {
			st := v.Message().Interface().(*structpb.Struct)
			if w, _ := proto.GetExtension(fd.Options(), cyclesv1.E_Wire).(*cyclesv1.WireMember); w != nil {
				writeAny(buf, integerStruct(st, w))
				return
			}
			writeAny(buf, st.AsMap())
			return
		}
		sub := mb.sub
		if sub == nil && set != nil {
			sub = set.by[fd.Message().FullName()]
		}
		if sub == nil {
			panic("protowire: no wire shape for " + string(fd.Message().FullName()))
		}
		sub.write(buf, v.Message(), set)
	default:
		panic("protowire: no wire rule for " + fd.Kind().String())
	}
}

func writeMap(buf *bytes.Buffer, fd protoreflect.FieldDescriptor, m protoreflect.Map) {
	keys := make([]string, 0, m.Len())
	m.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
		keys = append(keys, k.String())
		return true
	})
	slices.Sort(keys)
	buf.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			buf.WriteByte(',')
		}
		writeString(buf, k)
		buf.WriteByte(':')
		writeValue(buf, fd.MapValue(), m.Get(protoreflect.ValueOfString(k).MapKey()), member{}, nil)
	}
	buf.WriteByte('}')
}

// writeString writes s as encoding/json does (HTML-safe escapes included),
// so shaped and hand-written answers escape alike.
func writeString(buf *bytes.Buffer, s string) {
	b, _ := json.Marshal(s) // a string always encodes
	buf.Write(b)
}
