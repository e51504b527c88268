// Package protowire reads JSON bodies into protobuf messages and writes
// messages as JSON answers, by the rules of the Cycles HTTP/JSON wire. It
// knows messages, not routes: what a message's JSON differs in is declared
// on the message itself, as the options of proto/cycles/v1/http.proto
// ((cycles.v1.wire) on a field, (cycles.v1.wire_message) on a message,
// (cycles.v1.wire_enum) on an enum), and answers are written from declared
// shapes (Shape). internal/api/cycleshttp is its one user today.
package protowire

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
)

// Request bodies are read straight into the protobuf request by one generic
// decoder, walking the JSON tokens beside the message descriptor. The wire's
// request rules are declared here once:
//   - a member is named exactly as its proto field (snake_case); any other
//     name, including one matching only case-insensitively (encoding/json's
//     folding, Kelvin sign included), is an unknown field: 400 naming it;
//   - a member name repeated in one object, at any depth (free-form metadata
//     included), is a 400 naming it: a proxy reading the body another way
//     must not see another value than the ledger;
//   - a member "x" of an int64 field "x_ms" is an RFC 3339 date-time ("" is
//     absent);
//   - a member already set before decoding (by a route's path or query) is
//     refused: a body cannot name another reservation, key or tenant;
//   - a wrapper message (one field, a list or map) is read from the bare
//     list or map it wraps;
//   - integers are read from the JSON number's text with strconv (never
//     through float64): a fraction, an exponent or a value out of the field's
//     range is a 400;
//   - an enum is its value's name without the enum's prefix ("TOKENS" for
//     UNIT_TOKENS; lower case where the enum's wire_enum option says so);
//     UNSPECIFIED and unknown names are a 400;
//   - google.protobuf.Struct members (metadata, metrics.custom) are free-form;
//     their numbers are doubles, as in any Struct (amounts never travel there);
//   - null is an absent member; a wrong JSON type is a 400 naming the member.
// Where the spec's body truly differs from the proto, the difference is
// declared on the message (http.proto's WireMember, WireMessage), each
// declaration saying why.

// rules are one message's declared differences, read once from its options.
type rules struct {
	named    map[string]protoreflect.FieldDescriptor // WireMember.name
	member   map[protoreflect.Name]*cyclesv1.WireMember
	extra    map[string]*cyclesv1.WireExtra
	required []string // wire names, in field order
	nonEmpty bool
}

// rulesCache holds each message's rules by full name (descriptors are
// immutable, so a message's rules never change).
var rulesCache sync.Map

func rulesOf(md protoreflect.MessageDescriptor) *rules {
	if r, ok := rulesCache.Load(md.FullName()); ok {
		return r.(*rules)
	}
	r := &rules{named: map[string]protoreflect.FieldDescriptor{}, member: map[protoreflect.Name]*cyclesv1.WireMember{},
		extra: map[string]*cyclesv1.WireExtra{}}
	if wm, _ := proto.GetExtension(md.Options(), cyclesv1.E_WireMessage).(*cyclesv1.WireMessage); wm != nil {
		for _, x := range wm.GetExtra() {
			r.extra[x.GetName()] = x
		}
		r.nonEmpty = wm.GetNonEmptyStrings()
	}
	for i := 0; i < md.Fields().Len(); i++ {
		fd := md.Fields().Get(i)
		w, _ := proto.GetExtension(fd.Options(), cyclesv1.E_Wire).(*cyclesv1.WireMember)
		if w == nil {
			continue
		}
		r.member[fd.Name()] = w
		name := string(fd.Name())
		if w.GetName() != "" {
			r.named[w.GetName()], name = fd, w.GetName()
		}
		if w.GetRequired() {
			r.required = append(r.required, name)
		}
	}
	rulesCache.Store(md.FullName(), r)
	return r
}

// Decode reads body (one valid JSON value) into m, whose fields already set
// (from a path or query) the body may not set again.
func Decode(body []byte, m protoreflect.Message) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return SyntaxError(err)
	}
	switch tok {
	case nil: // null: no members
		return nil
	case json.Delim('{'):
		return (&walker{dec: dec}).object(m, "")
	}
	return typeError("body", "an object", tok)
}

// SyntaxError is a body that is not one well-formed JSON value, as a 400
// naming body.
func SyntaxError(err error) error {
	var syn *json.SyntaxError
	switch {
	case errors.As(err, &syn):
		return apierr.Invalid("body", "malformed JSON at offset %d: %v", syn.Offset, syn)
	case errors.Is(err, io.EOF):
		return apierr.Invalid("body", "is empty; a JSON object is required")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return apierr.Invalid("body", "malformed JSON: unexpected end")
	}
	return apierr.Invalid("body", "malformed JSON: %v", err)
}

// walker reads the tokens of one body.
type walker struct {
	dec   *json.Decoder
	units []unitCheck
}

// unitCheck is an amount member's unit, compared with its message's unit
// field once the message is read.
type unitCheck struct {
	prefix, path string
	field        protoreflect.Name
	unit         protoreflect.EnumNumber
}

// extra reads a member the proto lacks (WireExtra): accepted values are
// not kept; any other is refused.
func (w *walker) extra(x *cyclesv1.WireExtra, path string) error {
	var v any
	if err := w.dec.Decode(&v); err != nil {
		return SyntaxError(err)
	}
	if s, ok := v.(string); x.GetAny() || v == nil || ok && slices.Contains(x.GetAllow(), s) {
		return nil
	}
	return apierr.Invalid(path, "%s", x.GetWhy())
}

// amount reads the spec's amount object into the int64 field fd; unit names
// the message field its unit must equal ("-": none).
func (w *walker) amount(m protoreflect.Message, fd protoreflect.FieldDescriptor, unit protoreflect.Name, path string) error {
	tok, err := w.dec.Token()
	if err != nil || tok == nil {
		return err
	}
	if tok != json.Delim('{') {
		return typeError(path, "an object", tok)
	}
	a := &cyclesv1.Amount{}
	if err := w.object(a.ProtoReflect(), path+"."); err != nil {
		return err
	}
	m.Set(fd, protoreflect.ValueOfInt64(a.GetAmount()))
	if unit != "-" {
		prefix, _ := strings.CutSuffix(path, string(fd.Name()))
		w.units = append(w.units, unitCheck{prefix: prefix, path: path, field: unit, unit: a.GetUnit().Number()})
	}
	return nil
}

// number reads a JSON number as its decimal text into string field fd.
func (w *walker) number(m protoreflect.Message, fd protoreflect.FieldDescriptor, path string) error {
	tok, err := w.dec.Token()
	if err != nil || tok == nil {
		return err
	}
	n, ok := tok.(json.Number)
	if !ok {
		return typeError(path, "a number", tok)
	}
	m.Set(fd, protoreflect.ValueOfString(string(n)))
	return nil
}

// instant reads an optional date-time where "" clears it (sets 0).
func (w *walker) instant(m protoreflect.Message, fd protoreflect.FieldDescriptor, path string) error {
	tok, err := w.dec.Token()
	if err != nil || tok == nil {
		return err
	}
	if tok == "" {
		m.Set(fd, protoreflect.ValueOfInt64(0))
		return nil
	}
	v, err := scalar(fd, tok, true, path)
	if err == nil {
		m.Set(fd, v)
	}
	return err
}

// object reads the members of an object (its '{' read) into m; prefix is
// the path of m's members ("estimate.").
func (w *walker) object(m protoreflect.Message, prefix string) error {
	md := m.Descriptor()
	rs := rulesOf(md)
	var seen []string
	for w.dec.More() {
		tok, err := w.dec.Token()
		if err != nil {
			return SyntaxError(err)
		}
		name, _ := tok.(string)
		path := prefix + name
		if path == "" { // a top-level member named "": the error names the body
			path = "body"
		}
		for _, s := range seen {
			if s == name {
				return apierr.Invalid(path, "duplicate key")
			}
		}
		seen = append(seen, name)
		if x := rs.extra[name]; x != nil {
			if err := w.extra(x, path); err != nil {
				return err
			}
			continue
		}
		fd, iso := rs.named[name], false
		if fd == nil {
			fd, iso = memberOf(md, name)
		}
		if fd == nil {
			return apierr.Invalid(path, "unknown field (member names are case-sensitive)")
		}
		if prefix == "" && m.Has(fd) {
			// Set from the path or query before the body was read: the
			// body may not name another reservation, key or tenant.
			return apierr.Invalid(path, "unknown field (the path or query gives it)")
		}
		wm := rs.member[fd.Name()]
		switch {
		case wm.GetAmountUnit() != "":
			err = w.amount(m, fd, protoreflect.Name(wm.GetAmountUnit()), path)
		case wm.GetNumberText():
			err = w.number(m, fd, path)
		case wm.GetEmptyClears() && iso:
			err = w.instant(m, fd, path)
		default:
			err = w.member(m, fd, iso, path)
		}
		if err != nil {
			return err
		}
	}
	if _, err := w.dec.Token(); err != nil { // '}'
		return SyntaxError(err)
	}
	// Amounts are checked against their unit once it is read (a missing
	// unit is the validator's to name).
	for _, u := range w.units {
		if got := m.Get(md.Fields().ByName(u.field)).Enum(); u.prefix == prefix && got != 0 && got != u.unit {
			return apierr.New(apierr.UnitMismatch, "%s.unit must be the budget's unit %s", u.path,
				EnumName(md.Fields().ByName(u.field).Enum(), got)).With("field", u.path+".unit")
		}
	}
	for _, want := range rs.required {
		if !slices.Contains(seen, want) {
			return apierr.Invalid(prefix+want, "is required")
		}
	}
	return nil
}

// memberOf is the field a member name binds: the field of that name, else
// the int64 field name_ms read as a date-time (iso).
func memberOf(md protoreflect.MessageDescriptor, name string) (fd protoreflect.FieldDescriptor, iso bool) {
	fields := md.Fields()
	if f := fields.ByName(protoreflect.Name(name)); f != nil {
		return f, false
	}
	if f := fields.ByName(protoreflect.Name(name + "_ms")); f != nil && f.Kind() == protoreflect.Int64Kind && !f.IsList() {
		return f, true
	}
	return nil, false
}

// member reads one member's value into field fd of m.
func (w *walker) member(m protoreflect.Message, fd protoreflect.FieldDescriptor, iso bool, path string) error {
	tok, err := w.dec.Token()
	if err != nil {
		return SyntaxError(err)
	}
	if tok == nil {
		return nil // null: absent
	}
	if iso && tok == "" {
		return nil // an empty date-time: absent (no expiry)
	}
	if !iso {
		return w.memberAt(m, fd, path, tok)
	}
	v, err := scalar(fd, tok, true, path)
	if err == nil {
		m.Set(fd, v)
	}
	return err
}

// isWrapper: a message whose one field is a list or map (ApiKeyStrings,
// ActionKindList, ActionQuotaList): it tells "absent" from "empty" in a
// partial update, and the wire sends the bare list or map.
func isWrapper(md protoreflect.MessageDescriptor) bool {
	return md.Fields().Len() == 1 && (md.Fields().Get(0).IsList() || md.Fields().Get(0).IsMap())
}

// memberAt reads the value starting at tok (not null) into field fd of m.
func (w *walker) memberAt(m protoreflect.Message, fd protoreflect.FieldDescriptor, path string, tok json.Token) error {
	switch {
	case fd.IsList():
		if tok != json.Delim('[') {
			return typeError(path, "an array", tok)
		}
		l := m.Mutable(fd).List()
		for w.dec.More() {
			v, err := w.element(l.NewElement, fd, path)
			if err != nil {
				return err
			}
			l.Append(v)
		}
		_, err := w.dec.Token() // ']'
		return err
	case fd.IsMap():
		if tok != json.Delim('{') {
			return typeError(path, "an object", tok)
		}
		mp := m.Mutable(fd).Map()
		for w.dec.More() {
			kt, err := w.dec.Token()
			if err != nil {
				return SyntaxError(err)
			}
			k := protoreflect.ValueOfString(kt.(string)).MapKey()
			if mp.Has(k) {
				return apierr.Invalid(path+"."+k.String(), "duplicate key")
			}
			v, err := w.element(mp.NewValue, fd.MapValue(), path+"."+k.String())
			if err != nil {
				return err
			}
			mp.Set(k, v)
		}
		_, err := w.dec.Token() // '}'
		return err
	case fd.Message() != nil && fd.Message().FullName() == "google.protobuf.Struct":
		if tok != json.Delim('{') {
			return typeError(path, "an object", tok)
		}
		s, err := w.freeObject(path)
		if err != nil {
			return err
		}
		m.Set(fd, protoreflect.ValueOfMessage(s.ProtoReflect()))
		return nil
	case fd.Kind() == protoreflect.MessageKind && isWrapper(fd.Message()):
		// A wrapper (one field, "values") tells "absent" from "empty" in
		// a partial update; the wire sends the bare list or map.
		sub := m.Mutable(fd).Message()
		return w.memberAt(sub, sub.Descriptor().Fields().Get(0), path, tok)
	case fd.Kind() == protoreflect.MessageKind:
		if tok != json.Delim('{') {
			return typeError(path, "an object", tok)
		}
		return w.object(m.Mutable(fd).Message(), path+".")
	}
	v, err := scalar(fd, tok, false, path)
	if err != nil {
		return err
	}
	if fd.Kind() == protoreflect.StringKind && v.String() == "" && rulesOf(m.Descriptor()).nonEmpty {
		return apierr.Invalid(path, "must not be empty")
	}
	m.Set(fd, v)
	return nil
}

// element reads one list element or map value of field fd (a message one
// into a new value from newValue).
func (w *walker) element(newValue func() protoreflect.Value, fd protoreflect.FieldDescriptor, path string) (protoreflect.Value, error) {
	tok, err := w.dec.Token()
	if err != nil {
		return protoreflect.Value{}, SyntaxError(err)
	}
	if fd.Kind() == protoreflect.MessageKind {
		v := newValue()
		if tok == nil {
			return v, nil
		}
		if tok != json.Delim('{') {
			return v, typeError(path, "an object", tok)
		}
		return v, w.object(v.Message(), path+".")
	}
	if tok == nil { // as encoding/json: a null element is the zero value
		return fd.Default(), nil
	}
	return scalar(fd, tok, false, path)
}

// scalar reads a scalar token into a value of field fd's kind.
func scalar(fd protoreflect.FieldDescriptor, tok json.Token, iso bool, path string) (protoreflect.Value, error) {
	switch fd.Kind() {
	case protoreflect.StringKind:
		if s, ok := tok.(string); ok {
			return protoreflect.ValueOfString(s), nil
		}
		return protoreflect.Value{}, typeError(path, "a string", tok)
	case protoreflect.BoolKind:
		if b, ok := tok.(bool); ok {
			return protoreflect.ValueOfBool(b), nil
		}
		return protoreflect.Value{}, typeError(path, "a boolean", tok)
	case protoreflect.EnumKind:
		s, ok := tok.(string)
		if !ok {
			return protoreflect.Value{}, typeError(path, "a string", tok)
		}
		if n, ok := EnumByName(fd.Enum(), s); ok {
			return protoreflect.ValueOfEnum(n), nil
		}
		return protoreflect.Value{}, apierr.Invalid(path, "unknown value %q", s)
	case protoreflect.Int64Kind:
		if iso {
			s, ok := tok.(string)
			t, err := time.Parse(time.RFC3339Nano, s)
			if !ok || err != nil {
				return protoreflect.Value{}, apierr.Invalid(path, "must be an RFC 3339 date-time")
			}
			return protoreflect.ValueOfInt64(t.UnixMilli()), nil
		}
		n, err := integer(tok, 64)
		if err != nil {
			return protoreflect.Value{}, typeError(path, "an integer within int64", tok)
		}
		return protoreflect.ValueOfInt64(n), nil
	case protoreflect.Int32Kind:
		n, err := integer(tok, 32)
		if err != nil {
			return protoreflect.Value{}, typeError(path, "an integer within int32", tok)
		}
		return protoreflect.ValueOfInt32(int32(n)), nil
	case protoreflect.DoubleKind:
		if n, ok := tok.(json.Number); ok {
			if f, err := strconv.ParseFloat(string(n), 64); err == nil {
				return protoreflect.ValueOfFloat64(f), nil
			}
		}
		return protoreflect.Value{}, typeError(path, "a number", tok)
	}
	// A request field of another kind is a declaration error, found by its
	// user's tests: refuse rather than guess.
	return protoreflect.Value{}, apierr.Invalid(path, "is not accepted on this wire")
}

// integer reads a JSON number's text as an integer of bits bits, exactly.
func integer(tok json.Token, bits int) (int64, error) {
	n, ok := tok.(json.Number)
	if !ok {
		return 0, errors.New("not a number")
	}
	return strconv.ParseInt(string(n), 10, bits)
}

// DecodeFree reads a body (one valid JSON value) that has no request proto
// as a free-form object, duplicate members refused.
func DecodeFree(body []byte) (map[string]*structpb.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, apierr.Invalid("body", "must be a JSON object")
	}
	s, err := (&walker{dec: dec}).freeObject("")
	return s.GetFields(), err
}

// freeObject reads a free-form object (its '{' read) as a Struct.
func (w *walker) freeObject(path string) (*structpb.Struct, error) {
	s := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for w.dec.More() {
		kt, err := w.dec.Token()
		if err != nil {
			return nil, SyntaxError(err)
		}
		k := kt.(string)
		at := k
		if path != "" {
			at = path + "." + k
		}
		if _, dup := s.Fields[k]; dup {
			return nil, apierr.Invalid(at, "duplicate key")
		}
		v, err := w.freeValue(at)
		if err != nil {
			return nil, err
		}
		s.Fields[k] = v
	}
	_, err := w.dec.Token() // '}'
	return s, err
}

// freeValue reads any JSON value as a Struct value.
func (w *walker) freeValue(path string) (*structpb.Value, error) {
	tok, err := w.dec.Token()
	if err != nil {
		return nil, SyntaxError(err)
	}
	switch t := tok.(type) {
	case nil:
		return structpb.NewNullValue(), nil
	case bool:
		return structpb.NewBoolValue(t), nil
	case string:
		return structpb.NewStringValue(t), nil
	case json.Number:
		f, err := strconv.ParseFloat(string(t), 64)
		if err != nil {
			return nil, apierr.Invalid(path, "%v", err)
		}
		return structpb.NewNumberValue(f), nil
	case json.Delim:
		if t == '{' {
			s, err := w.freeObject(path)
			if err != nil {
				return nil, err
			}
			return structpb.NewStructValue(s), nil
		}
		l := &structpb.ListValue{}
		for w.dec.More() {
			v, err := w.freeValue(path)
			if err != nil {
				return nil, err
			}
			l.Values = append(l.Values, v)
		}
		if _, err := w.dec.Token(); err != nil { // ']'
			return nil, SyntaxError(err)
		}
		return structpb.NewListValue(l), nil
	}
	return nil, apierr.Invalid(path, "malformed JSON")
}

// typeError refuses a member of the wrong JSON type, naming what it got.
func typeError(path, want string, tok json.Token) error {
	got := "null"
	switch t := tok.(type) {
	case string:
		got = "string"
	case bool:
		got = "bool"
	case json.Number:
		got = "number " + string(t)
	case json.Delim:
		got = "object"
		if t == '[' {
			got = "array"
		}
	}
	return apierr.Invalid(path, "must be %s, got JSON %s", want, got)
}
