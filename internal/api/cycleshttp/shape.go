package cycleshttp

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Answers whose wire shape follows the proto are written by one generic
// encoder from a declared shape, not by a hand-written type each. The wire's
// rules are declared here once:
//   - a member is named for its proto field (snake_case);
//   - "wire=field" renames (the spec's name is not the field's);
//   - a member "x" read from an int64 field "x_ms" is that instant as an
//     ISO 8601 date-time in UTC, milliseconds precise ("" when 0);
//   - a trailing "?" omits the member when it is zero, empty or unset;
//     without it the member is always written (lists as [], never null);
//   - an enum is its value's name without the enum's prefix ("UNIT_TOKENS"
//     is "TOKENS"; UNSPECIFIED is "");
//   - an integer is written exactly (int64 never passes through float64);
//   - a map is an object with sorted keys; strings are escaped as
//     encoding/json escapes them.
// Answers whose shape truly differs from the proto (amount objects built from
// bare integers, members derived from others, runtime bodies the official SDKs
// read strictly) keep hand-written types; each says why.

// shape is a message's wire members, in wire order.
type shape struct {
	members []member
}

type member struct {
	wire  string
	field protoreflect.Name
	omit  bool
	// A message member is written by each (a hand-written type) or in sub.
	each func(protoreflect.Message) any
	sub  *shape
	// fixed is the member's constant value, for a spec member the proto does
	// not carry (what cyclesd never has, such as webhook counts).
	fixed json.RawMessage
}

// shapeOf declares a shape: each spec is "name", "name?", "wire=field" or
// "wire=field?" (see the rules above). Fields are checked on first use.
func shapeOf(specs ...string) *shape {
	s := &shape{}
	for _, spec := range specs {
		m := member{}
		spec, m.omit = strings.CutSuffix(spec, "?")
		wire, field, renamed := strings.Cut(spec, "=")
		if !renamed {
			field = wire
		}
		m.wire, m.field = wire, protoreflect.Name(field)
		s.members = append(s.members, m)
	}
	return s
}

// with writes the message members named wire with each (a hand-written
// type where the item's shape differs from its proto).
func (s *shape) with(wire string, each func(protoreflect.Message) any) *shape {
	for i := range s.members {
		if s.members[i].wire == wire {
			s.members[i].each = each
			return s
		}
	}
	panic("cycleshttp: shape has no member " + wire)
}

// nest writes the message members named wire in shape sub.
func (s *shape) nest(wire string, sub *shape) *shape {
	for i := range s.members {
		if s.members[i].wire == wire {
			s.members[i].sub = sub
			return s
		}
	}
	panic("cycleshttp: shape has no member " + wire)
}

// fixed writes the member named wire as the constant value raw (JSON).
func (s *shape) fixed(wire, raw string) *shape {
	for i := range s.members {
		if s.members[i].wire == wire {
			s.members[i].fixed = json.RawMessage(raw)
			return s
		}
	}
	panic("cycleshttp: shape has no member " + wire)
}

// item adapts a hand-written item encoder to shape.with.
func item[M proto.Message, O any](f func(M) O) func(protoreflect.Message) any {
	return func(m protoreflect.Message) any { return f(m.Interface().(M)) }
}

// page is a list answer's shape: its items (written by each), next_cursor
// (omitted when there is no next page) and has_more.
func page(items string, each func(protoreflect.Message) any) *shape {
	s := shapeOf(items, "next_cursor?", "has_more")
	s.members[0].each = each
	return s
}

// shaped is a route encoder writing the answer in shape s. A shape naming
// no field of its message panics here, when the route table is built.
func shaped[Resp proto.Message](s *shape) func(Resp) json.RawMessage {
	var zero Resp
	s.check(zero.ProtoReflect().Descriptor())
	return func(resp Resp) json.RawMessage {
		var buf bytes.Buffer
		s.write(&buf, resp.ProtoReflect())
		return buf.Bytes()
	}
}

// fieldOf is the field member mb reads, and whether it is an instant
// written as an ISO date-time (member "x" from int64 field "x_ms").
func (mb member) fieldOf(md protoreflect.MessageDescriptor) (protoreflect.FieldDescriptor, bool) {
	fields := md.Fields()
	if fd := fields.ByName(mb.field); fd != nil {
		return fd, false
	}
	if fd := fields.ByName(mb.field + "_ms"); fd != nil && fd.Kind() == protoreflect.Int64Kind {
		return fd, true
	}
	panic("cycleshttp: " + string(md.FullName()) + " has no field " + string(mb.field))
}

// check walks s (and its nested shapes) against md.
func (s *shape) check(md protoreflect.MessageDescriptor) {
	for _, mb := range s.members {
		if mb.fixed != nil {
			continue
		}
		if fd, _ := mb.fieldOf(md); mb.sub != nil {
			mb.sub.check(fd.Message())
		}
	}
}

func (s *shape) write(buf *bytes.Buffer, m protoreflect.Message) {
	buf.WriteByte('{')
	first := true
	for _, mb := range s.members {
		if mb.fixed != nil {
			if !first {
				buf.WriteByte(',')
			}
			first = false
			writeString(buf, mb.wire)
			buf.WriteByte(':')
			buf.Write(mb.fixed)
			continue
		}
		fd, iso := mb.fieldOf(m.Descriptor())
		v := m.Get(fd)
		empty := !m.Has(fd) || (iso && v.Int() == 0)
		if mb.omit && empty {
			continue
		}
		if !first {
			buf.WriteByte(',')
		}
		first = false
		writeString(buf, mb.wire)
		buf.WriteByte(':')
		switch {
		case iso:
			writeString(buf, isoTime(v.Int()))
		case fd.IsList():
			l := v.List()
			buf.WriteByte('[')
			for i := 0; i < l.Len(); i++ {
				if i > 0 {
					buf.WriteByte(',')
				}
				writeValue(buf, fd, l.Get(i), mb)
			}
			buf.WriteByte(']')
		case fd.IsMap():
			writeMap(buf, fd, v.Map())
		default:
			writeValue(buf, fd, v, mb)
		}
	}
	buf.WriteByte('}')
}

func writeValue(buf *bytes.Buffer, fd protoreflect.FieldDescriptor, v protoreflect.Value, mb member) {
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
		writeString(buf, enumName(fd.Enum(), v.Enum()))
	case protoreflect.MessageKind:
		if mb.each != nil {
			b, err := json.Marshal(mb.each(v.Message()))
			if err != nil {
				panic("cycleshttp: " + err.Error()) // hand-written wire types always encode
			}
			buf.Write(b)
			return
		}
		if mb.sub == nil {
			panic("cycleshttp: no wire shape for " + string(fd.Message().FullName()))
		}
		mb.sub.write(buf, v.Message())
	default:
		panic("cycleshttp: no wire rule for " + fd.Kind().String())
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
		writeValue(buf, fd.MapValue(), m.Get(protoreflect.ValueOfString(k).MapKey()), member{})
	}
	buf.WriteByte('}')
}

// writeString writes s as encoding/json does (HTML-safe escapes included),
// so shaped and hand-written answers escape alike.
func writeString(buf *bytes.Buffer, s string) {
	b, _ := json.Marshal(s) // a string always encodes
	buf.Write(b)
}

// enumName is v's wire name (enumNames); "" for UNSPECIFIED or a number
// the enum does not know.
func enumName(ed protoreflect.EnumDescriptor, v protoreflect.EnumNumber) string {
	vd := ed.Values().ByNumber(v)
	if v == 0 || vd == nil {
		return ""
	}
	name := strings.TrimPrefix(string(vd.Name()), enumPrefix(ed))
	if lowerEnums[ed.FullName()] {
		return strings.ToLower(name)
	}
	return name
}
