package cycleshttp

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
)

// Request bodies are read straight into the route's protobuf request by one
// generic decoder, walking the JSON tokens beside the message descriptor. The
// wire's request rules are declared here once:
//   - a member is named exactly as its proto field (snake_case); any other
//     name, including one matching only case-insensitively (encoding/json's
//     folding, Kelvin sign included), is an unknown field: 400 naming it;
//   - a member name repeated in one object, at any depth (free-form metadata
//     included), is a 400 naming it: a proxy reading the body another way
//     must not see another value than the ledger;
//   - a member "x" of an int64 field "x_ms" is an RFC 3339 date-time ("" is
//     absent);
//   - a member already set by the path or query is refused: a body cannot
//     name another reservation, key or tenant than its path;
//   - a wrapper message (one field, "values": ApiKeyStrings) is read from
//     the bare list or map it wraps;
//   - integers are read from the JSON number's text with strconv (never
//     through float64): a fraction, an exponent or a value out of the field's
//     range is a 400;
//   - an enum is its value's name without the enum's prefix ("TOKENS" for
//     UNIT_TOKENS; lower case for lowerEnums); UNSPECIFIED and unknown names
//     are a 400;
//   - google.protobuf.Struct members (metadata, metrics.custom) are free-form;
//     their numbers are doubles, as in any Struct (amounts never travel there);
//   - null is an absent member; a wrong JSON type is a 400 naming the member.
// Where the spec's body truly differs from the request proto, the difference
// is declared in the tables below, by message, each entry saying why.

// wireMember is a body member the request proto does not spell the same way.
type wireMember struct {
	field protoreflect.Name // the member binds this field (renamed)
	// amount: the member is the spec's amount object {unit, amount}, kept as
	// the bare int64 field; its unit must equal the message's field of this
	// name ("-": not compared). The admin protos count a budget's amounts
	// in its one unit.
	amount protoreflect.Name
	// allow: a member the proto lacks; these values (and null) are accepted
	// and not kept, any other is refused with why.
	allow []string
	why   string
	any   bool // a member the proto lacks, accepted in any form and not kept
	// number: a JSON number kept as its decimal text in a string field
	// (bulk utilization bounds: decimals, compared exactly downstream).
	number bool
	// clear: "" sets the optional instant to 0, clearing it (a PATCH).
	clear bool
}

const (
	noHierarchy = "tenant hierarchies are not supported by cyclesd"
	notServed   = "is not served by cyclesd"
)

// wireMembers are the spec's members that differ from the request proto.
var wireMembers = map[protoreflect.FullName]map[string]wireMember{
	"cycles.v1.CreateTenantRequest": {
		"parent_tenant_id": {allow: []string{""}, why: noHierarchy},
		// cyclesd always releases expired reservations.
		"reservation_expiry_policy": {allow: []string{"", "AUTO_RELEASE"}, why: "cyclesd always releases expired reservations (AUTO_RELEASE)"},
		// A new tenant enforces (the spec's default); OBSERVE is set by PATCH.
		"observe_mode": {allow: []string{"ENFORCE", "DISABLED"}, why: "a new tenant enforces; set OBSERVE with PATCH /v1/admin/tenants/{tenant_id}"},
	},
	"cycles.v1.UpdateTenantRequest": {
		"parent_tenant_id":          {allow: []string{""}, why: noHierarchy},
		"reservation_expiry_policy": {allow: []string{"", "AUTO_RELEASE"}, why: "cyclesd always releases expired reservations (AUTO_RELEASE)"},
		"replace_metadata":          {why: "unknown field"}, // gRPC only: the spec merges metadata
	},
	"cycles.v1.CreateBudgetRequest": {
		"scope":           {field: "scope_path"},
		"allocated":       {amount: "unit"},
		"overdraft_limit": {amount: "unit"},
		"rollover_policy": {allow: []string{"", "NONE"}, why: "only NONE is supported"},
		"period_start":    {allow: []string{""}, why: "budget periods are not supported; use fund RESET_SPENT at a period boundary"},
		"period_end":      {allow: []string{""}, why: "budget periods are not supported; use fund RESET_SPENT at a period boundary"},
	},
	"cycles.v1.UpdateBudgetRequest": {"overdraft_limit": {amount: "unit"}},
	"cycles.v1.FundBudgetRequest":   {"amount": {amount: "unit"}, "spent": {amount: "unit"}, "metadata": {any: true}},
	// A budget transition's body is {reason, metadata}; metadata is not kept.
	"cycles.v1.FreezeBudgetRequest":   {"metadata": {any: true}},
	"cycles.v1.UnfreezeBudgetRequest": {"metadata": {any: true}},
	"cycles.v1.CloseBudgetRequest":    {"metadata": {any: true}},
	"cycles.v1.TenantBulkFilter": {
		"parent_tenant_id": {allow: []string{""}, why: noHierarchy},
		"observe_mode":     {any: true}, // v0.1.26; ignored, as the spec allows
	},
	"cycles.v1.BudgetBulkFilter": {"utilization_min": {number: true}, "utilization_max": {number: true}},
	// spent is RESET_SPENT's new spent, in the action's amount unit.
	"cycles.v1.BulkActionBudgetsRequest": {"spent": {amount: "-"}},
	"cycles.v1.UpdateScopePolicyRequest": {
		"effective_from":  {field: "effective_from_ms", clear: true},
		"effective_until": {field: "effective_until_ms", clear: true},
	},
}

// requiredMembers are members a body must carry when the object holding them
// is present: proto3 cannot mark them required, and the spec does (an
// amount object is its unit and its amount; extend needs extend_by_ms).
var requiredMembers = map[protoreflect.FullName][]string{
	"cycles.v1.Amount":                   {"unit", "amount"},
	"cycles.v1.ExtendReservationRequest": {"extend_by_ms"},
	"cycles.v1.CreateBudgetRequest":      {"allocated"},
	"cycles.v1.FundBudgetRequest":        {"operation", "amount"},
	"cycles.v1.BulkActionBudgetsRequest": {"amount"},
	"cycles.v1.CreateScopePolicyRequest": {"tenant_id"},
}

// nonEmptyStrings are messages whose string members, when present, must not
// be empty: the spec's charset pattern refuses "", and the ledger reads an
// empty subject level as absent.
var nonEmptyStrings = map[protoreflect.FullName]bool{
	"cycles.v1.Subject": true,
}

// protoJSON reads the JSON body into the request (which path and query
// parameters have already set).
func protoJSON[Req proto.Message](a *API, w http.ResponseWriter, r *http.Request, req Req) error {
	body, err := a.readBody(w, r)
	if err != nil {
		return err
	}
	return decodeMessage(body, req.ProtoReflect())
}

// readBody reads a bounded body that is exactly one well-formed JSON value
// (within encoding/json's nesting limit); anything else is a 400 naming body.
func (a *API) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, a.maxBody))
	if err != nil {
		return nil, jsonError(err, a.maxBody)
	}
	if json.Valid(body) {
		return body, nil
	}
	// Invalid: decode once more only to say where and why.
	dec := json.NewDecoder(bytes.NewReader(body))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return nil, jsonError(err, a.maxBody)
	}
	if _, err := dec.Token(); err != nil && !errors.Is(err, io.EOF) {
		return nil, jsonError(err, a.maxBody)
	}
	return nil, apierr.Invalid("body", "has data after the JSON object")
}

// decodeMessage reads body (one valid JSON value) into m.
func decodeMessage(body []byte, m protoreflect.Message) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return jsonError(err, 0)
	}
	switch tok {
	case nil: // null: no members
		return nil
	case json.Delim('{'):
		return (&walker{dec: dec}).object(m, "")
	}
	return typeError("body", "an object", tok)
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

// extra reads a member the proto lacks (wireMembers): accepted values are
// not kept; any other is refused.
func (w *walker) extra(wm wireMember, path string) error {
	var v any
	if err := w.dec.Decode(&v); err != nil {
		return jsonError(err, 0)
	}
	if s, ok := v.(string); wm.any || v == nil || ok && slices.Contains(wm.allow, s) {
		return nil
	}
	return apierr.Invalid(path, "%s", wm.why)
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
	var seen []string
	for w.dec.More() {
		tok, err := w.dec.Token()
		if err != nil {
			return jsonError(err, 0)
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
		wm, special := wireMembers[md.FullName()][name]
		if special && wm.field == "" && wm.amount == "" && !wm.number && !wm.clear {
			if err := w.extra(wm, path); err != nil {
				return err
			}
			continue
		}
		fd, iso := memberOf(md, name)
		if special && wm.field != "" {
			fd, iso = md.Fields().ByName(wm.field), iso || strings.HasSuffix(string(wm.field), "_ms")
		}
		if fd == nil {
			return apierr.Invalid(path, "unknown field (member names are case-sensitive)")
		}
		if prefix == "" && m.Has(fd) {
			// Set from the path or query before the body was read: the
			// body may not name another reservation, key or tenant.
			return apierr.Invalid(path, "unknown field (the path or query gives it)")
		}
		switch {
		case wm.amount != "":
			err = w.amount(m, fd, wm.amount, path)
		case wm.number:
			err = w.number(m, fd, path)
		case wm.clear:
			err = w.instant(m, fd, path)
		default:
			err = w.member(m, fd, iso, path)
		}
		if err != nil {
			return err
		}
	}
	if _, err := w.dec.Token(); err != nil { // '}'
		return jsonError(err, 0)
	}
	// Amounts are checked against their unit once it is read (a missing
	// unit is the validator's to name).
	for _, u := range w.units {
		if got := m.Get(md.Fields().ByName(u.field)).Enum(); u.prefix == prefix && got != 0 && got != u.unit {
			return apierr.New(apierr.UnitMismatch, "%s.unit must be the budget's unit %s", u.path,
				enumName(md.Fields().ByName(u.field).Enum(), got)).With("field", u.path+".unit")
		}
	}
	for _, want := range requiredMembers[md.FullName()] {
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
		return jsonError(err, 0)
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
				return jsonError(err, 0)
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
	if fd.Kind() == protoreflect.StringKind && v.String() == "" && nonEmptyStrings[m.Descriptor().FullName()] {
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
		return protoreflect.Value{}, jsonError(err, 0)
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
		if n, ok := enumByName(fd.Enum(), s); ok {
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
	// A request field of another kind is a declaration error, found by the
	// route tests: refuse rather than guess.
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

// freeBody reads a body (one valid JSON value) that has no request proto as
// a free-form object, duplicate members refused.
func freeBody(body []byte) (map[string]*structpb.Value, error) {
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
			return nil, jsonError(err, 0)
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
		return nil, jsonError(err, 0)
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
			return nil, jsonError(err, 0)
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
