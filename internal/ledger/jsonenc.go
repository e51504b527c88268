package ledger

import (
	"fmt"
	"sort"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
)

// Direct JSON encoders for the two messages every reserve, decide and event
// stores (subject and action): protojson's reflection was 3% of cyclesd's
// CPU on the reserve path. The output is what protojson (UseProtoNames)
// produces up to whitespace and string-escape choices, i.e. the same JSON
// value: unpopulated fields omitted, map keys sorted. Anything unusual
// (invalid UTF-8) goes to protojson, which then reports the error.
// TestDirectJSONMatchesProtojson holds them to the same values.

// jsonOut is the encoding of the JSON that records keep.
var jsonOut = protojson.MarshalOptions{UseProtoNames: true}

// storedJSON is the stored JSON of a creating request's subject (already
// tenant-filled), action and metadata: the three every creating script
// records.
func storedJSON(subj *cyclesv1.Subject, action *cyclesv1.Action, meta proto.Message) (s, a, m string, err error) {
	if s, err = jsonOf(subj); err != nil {
		return "", "", "", err
	}
	if a, err = jsonOf(action); err != nil {
		return "", "", "", err
	}
	if m, err = jsonOf(meta); err != nil {
		return "", "", "", err
	}
	return s, a, m, nil
}

// jsonOf encodes a message for storage in a record ("" for nil).
func jsonOf(m proto.Message) (string, error) {
	if m == nil || !m.ProtoReflect().IsValid() {
		return "", nil
	}
	if s, ok := fastJSONOf(m); ok {
		return s, nil
	}
	b, err := jsonOut.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("encode %T: %w", m, err)
	}
	return string(b), nil
}

func fastJSONOf(m any) (string, bool) {
	switch v := m.(type) {
	case *cyclesv1.Subject:
		return subjectJSON(v)
	case *cyclesv1.Action:
		return actionJSON(v)
	}
	return "", false
}

type jsonBuf struct {
	b     []byte
	first bool
	ok    bool
}

func (j *jsonBuf) str(s string) {
	if !utf8.ValidString(s) {
		j.ok = false
		return
	}
	j.b = append(j.b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			j.b = append(j.b, '\\', c)
		case c < 0x20:
			switch c {
			case '\n':
				j.b = append(j.b, '\\', 'n')
			case '\r':
				j.b = append(j.b, '\\', 'r')
			case '\t':
				j.b = append(j.b, '\\', 't')
			default:
				const hex = "0123456789abcdef"
				j.b = append(j.b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
		default:
			j.b = append(j.b, c)
		}
	}
	j.b = append(j.b, '"')
}

// field writes "name":"value" unless value is empty (proto3 unpopulated).
func (j *jsonBuf) field(name, value string) {
	if value == "" {
		return
	}
	j.key(name)
	j.str(value)
}

func (j *jsonBuf) key(name string) {
	if !j.first {
		j.b = append(j.b, ',')
	}
	j.first = false
	j.b = append(j.b, '"')
	j.b = append(j.b, name...)
	j.b = append(j.b, '"', ':')
}

// open writes "name": and the bracket opening its array or object.
func (j *jsonBuf) open(name string, bracket byte) {
	j.key(name)
	j.b = append(j.b, bracket)
}

// sep writes the comma before element i of an array or object, but the first.
func (j *jsonBuf) sep(i int) {
	if i > 0 {
		j.b = append(j.b, ',')
	}
}

func newJSONBuf(size int) *jsonBuf {
	j := &jsonBuf{b: make([]byte, 0, size), first: true, ok: true}
	j.b = append(j.b, '{')
	return j
}

func (j *jsonBuf) done() (string, bool) {
	if !j.ok {
		return "", false
	}
	j.b = append(j.b, '}')
	return string(j.b), true
}

func subjectJSON(s *cyclesv1.Subject) (string, bool) {
	j := newJSONBuf(128)
	j.field("tenant", s.GetTenant())
	j.field("workspace", s.GetWorkspace())
	j.field("app", s.GetApp())
	j.field("workflow", s.GetWorkflow())
	j.field("agent", s.GetAgent())
	j.field("toolset", s.GetToolset())
	if dims := s.GetDimensions(); len(dims) > 0 {
		keys := make([]string, 0, len(dims))
		for k := range dims {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		j.open("dimensions", '{')
		for i, k := range keys {
			j.sep(i)
			j.str(k)
			j.b = append(j.b, ':')
			j.str(dims[k])
		}
		j.b = append(j.b, '}')
	}
	return j.done()
}

func actionJSON(a *cyclesv1.Action) (string, bool) {
	if a.GetPolicyKeys() != nil {
		// v0.1.26 policy_keys (quota allowlists read them in the script):
		// the general encoder writes them.
		return "", false
	}
	j := newJSONBuf(96)
	j.field("kind", a.GetKind())
	j.field("name", a.GetName())
	if tags := a.GetTags(); len(tags) > 0 {
		j.open("tags", '[')
		for i, t := range tags {
			j.sep(i)
			j.str(t)
		}
		j.b = append(j.b, ']')
	}
	return j.done()
}
