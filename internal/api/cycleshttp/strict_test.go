package cycleshttp

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/cyclesgo/cycles-go/internal/apierr"
)

const strictBase = `"idempotency_key":"k","subject":{"workspace":"prod"},"action":{"kind":"k","name":"n"}`

// decodeReserve runs a reserve body through the wire decoder.
func decodeReserve(body string) (*reserveIn, error) {
	a := &API{maxBody: 64 << 10}
	r := httptest.NewRequest(http.MethodPost, "/v1/reservations", strings.NewReader(body))
	var in reserveIn
	err := a.decodeJSON(httptest.NewRecorder(), r, &in)
	return &in, err
}

// Member names are exact: a name that matches a field only case-insensitively
// (encoding/json's folding, Kelvin sign included) is an unknown field, and a
// repeated member at any depth is a 400 naming it; exact int64 survives.
func TestStrictJSONMemberNames(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		field      string // "" = accepted
		msg        string
	}{
		{"exact", `{` + strictBase + `,"estimate":{"unit":"TOKENS","amount":9223372036854775807}}`, "", ""},
		{"mixed case", `{` + strictBase + `,"eStImAtE":{"unit":"TOKENS","amount":1}}`, "eStImAtE", "unknown field"},
		{"upper case nested", `{` + strictBase + `,"estimate":{"UNIT":"TOKENS","amount":1}}`, "estimate.UNIT", "unknown field"},
		{"Kelvin sign in a name", `{"idempotency_key":"k","action":{"\u212aind":"k","name":"n"}}`, "action.\u212aind", "unknown field"},
		{"Kelvin sign raw", "{\"idempotency_key\":\"k\",\"action\":{\"\u212aind\":\"k\",\"name\":\"n\"}}", "action.\u212aind", "unknown field"},
		{"estimate and ESTIMATE", `{` + strictBase + `,"estimate":{"unit":"TOKENS","amount":1},"ESTIMATE":{"unit":"TOKENS","amount":1000}}`, "ESTIMATE", "unknown field"},
		{"duplicate top level", `{` + strictBase + `,"estimate":{"unit":"TOKENS","amount":1},"estimate":{"unit":"TOKENS","amount":1000}}`, "estimate", "duplicate key"},
		{"duplicate nested", `{` + strictBase + `,"estimate":{"unit":"TOKENS","amount":1,"amount":1000}}`, "estimate.amount", "duplicate key"},
		{"duplicate in a free-form map", `{` + strictBase + `,"metadata":{"a":{"b":1,"b":2}}}`, "metadata.a.b", "duplicate key"},
		{"duplicate inside an array", `{` + strictBase + `,"metadata":{"l":[{"x":1},{"x":1,"x":2}]}}`, "metadata.l.x", "duplicate key"},
		{"duplicate dimension", `{"idempotency_key":"k","subject":{"workspace":"p","dimensions":{"d":"1","d":"2"}}}`, "subject.dimensions.d", "duplicate key"},
		{"free-form keys keep their case", `{` + strictBase + `,"metadata":{"Key":1,"key":2}}`, "", ""},
		{"same name in sibling objects", `{` + strictBase + `,"metadata":{"a":{"x":1},"b":{"x":1}}}`, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, err := decodeReserve(tc.body)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if in.Estimate != nil && *in.Estimate.Amount != 9223372036854775807 {
					t.Fatalf("amount = %d", *in.Estimate.Amount)
				}
				return
			}
			e, ok := apierr.As(err)
			if !ok || e.Code != apierr.InvalidRequest {
				t.Fatalf("err = %v, want INVALID_REQUEST", err)
			}
			if e.Details["field"] != tc.field || !strings.Contains(e.Message, tc.msg) {
				t.Fatalf("field %q message %q, want field %q and %q", e.Details["field"], e.Message, tc.field, tc.msg)
			}
		})
	}
}

// duplicateFree reports whether no object in body repeats a member name
// (an oracle independent of the types).
func duplicateFree(body string) bool {
	type frame struct {
		obj, wantKey bool
		seen         map[string]bool
	}
	var st []*frame
	valueDone := func() {
		if len(st) > 0 && st[len(st)-1].obj {
			st[len(st)-1].wantKey = true
		}
	}
	dec := json.NewDecoder(strings.NewReader(body))
	for {
		tok, err := dec.Token()
		if err != nil {
			return true // end, or malformed: not this oracle's concern
		}
		if s, ok := tok.(string); ok && len(st) > 0 && st[len(st)-1].obj && st[len(st)-1].wantKey {
			top := st[len(st)-1]
			if top.seen[s] {
				return false
			}
			top.seen[s], top.wantKey = true, false
			continue
		}
		switch tok {
		case json.Delim('{'):
			st = append(st, &frame{obj: true, wantKey: true, seen: map[string]bool{}})
		case json.Delim('['):
			st = append(st, &frame{})
		case json.Delim('}'), json.Delim(']'):
			st = st[:len(st)-1]
			valueDone()
		default:
			valueDone()
		}
	}
}

// FuzzStrictJSON: whatever the body, the decoder never panics, a refusal is
// INVALID_REQUEST naming a field, and an accepted body has no repeated
// member and only exact top-level names (seeds in testdata/fuzz).
func FuzzStrictJSON(f *testing.F) {
	for _, s := range []string{
		`{` + strictBase + `,"estimate":{"unit":"TOKENS","amount":1}}`,
		`{` + strictBase + `,"eStImAtE":{"unit":"TOKENS","amount":1}}`,
		`{` + strictBase + `,"estimate":{"unit":"TOKENS","amount":1},"estimate":{"unit":"TOKENS","amount":2}}`,
		`{"metadata":{"a":[{"b":1,"b":2}]}}`,
		`{"action":{"\u212aind":"k"}}`,
		`{"subject":{"dimensions":{"x":"1","X":"2"}}}`,
	} {
		f.Add(s)
	}
	fields := jsonFields(reflect.TypeOf(reserveIn{}))
	f.Fuzz(func(t *testing.T, body string) {
		_, err := decodeReserve(body)
		if err != nil {
			e, ok := apierr.As(err)
			if !ok || e.Code != apierr.InvalidRequest || e.Details["field"] == "" {
				t.Fatalf("body %q: %v, want INVALID_REQUEST naming a field", body, err)
			}
			return
		}
		if !duplicateFree(body) {
			t.Fatalf("body %q accepted with a repeated member", body)
		}
		var top map[string]json.RawMessage
		if json.Unmarshal([]byte(body), &top) == nil {
			for k := range top {
				if _, ok := fields[k]; !ok {
					t.Fatalf("body %q accepted with member %q, not an exact field name", body, k)
				}
			}
		}
	})
}
