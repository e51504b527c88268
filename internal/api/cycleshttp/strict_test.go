package cycleshttp

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
)

const strictBase = `"idempotency_key":"k","subject":{"workspace":"prod"},"action":{"kind":"k","name":"n"}`

// wantInvalid fails unless err is INVALID_REQUEST naming field, its message
// containing msg.
func wantInvalid(t *testing.T, err error, field, msg string) {
	t.Helper()
	e, ok := apierr.As(err)
	if !ok || e.Code != apierr.InvalidRequest {
		t.Fatalf("err = %v, want INVALID_REQUEST", err)
	}
	if e.Details["field"] != field || !strings.Contains(e.Message, msg) {
		t.Fatalf("field %q message %q, want field %q and %q", e.Details["field"], e.Message, field, msg)
	}
}

// decodeReserve runs a reserve body through the wire decoder.
func decodeReserve(body string) (*cyclesv1.CreateReservationRequest, error) {
	a := &API{maxBody: 64 << 10}
	r := httptest.NewRequest(http.MethodPost, "/v1/reservations", strings.NewReader(body))
	in := &cyclesv1.CreateReservationRequest{}
	err := protoJSON(a, httptest.NewRecorder(), r, in)
	return in, err
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
				if in.Estimate != nil && in.Estimate.Amount != 9223372036854775807 {
					t.Fatalf("amount = %d", in.Estimate.Amount)
				}
				return
			}
			wantInvalid(t, err, tc.field, tc.msg)
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
	fields := (&cyclesv1.CreateReservationRequest{}).ProtoReflect().Descriptor().Fields()
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
				if fields.ByName(protoreflect.Name(k)) == nil {
					t.Fatalf("body %q accepted with member %q, not an exact field name", body, k)
				}
			}
		}
	})
}

// The decoder's value rules, one case each: exact integers, types, enum
// names, date-times, required members, non-empty subject levels, free-form
// metadata, null as absent.
func TestDecodeValues(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		field      string // "" = accepted
		msg        string
		check      func(*cyclesv1.CreateReservationRequest) bool
	}{
		{name: "int64 max exact", body: `{"estimate":{"unit":"USD_MICROCENTS","amount":9223372036854775807}}`,
			check: func(r *cyclesv1.CreateReservationRequest) bool {
				return r.GetEstimate().GetAmount() == 9223372036854775807 && r.GetEstimate().GetUnit() == cyclesv1.Unit_UNIT_USD_MICROCENTS
			}},
		{name: "int64 min exact", body: `{"estimate":{"unit":"TOKENS","amount":-9223372036854775808}}`,
			check: func(r *cyclesv1.CreateReservationRequest) bool {
				return r.GetEstimate().GetAmount() == -9223372036854775808
			}},
		{name: "past int64", body: `{"estimate":{"unit":"TOKENS","amount":9223372036854775808}}`, field: "estimate.amount", msg: "integer within int64"},
		{name: "fraction", body: `{"estimate":{"unit":"TOKENS","amount":1.5}}`, field: "estimate.amount", msg: "got JSON number 1.5"},
		{name: "exponent", body: `{"ttl_ms":1e3}`, field: "ttl_ms", msg: "integer"},
		{name: "integer as string", body: `{"ttl_ms":"1000"}`, field: "ttl_ms", msg: "got JSON string"},
		{name: "optional int kept", body: `{"ttl_ms":0}`,
			check: func(r *cyclesv1.CreateReservationRequest) bool { return r.TtlMs != nil && *r.TtlMs == 0 }},
		{name: "enum by wire name", body: `{"overage_policy":"ALLOW_WITH_OVERDRAFT","observe_mode":"OBSERVE"}`,
			check: func(r *cyclesv1.CreateReservationRequest) bool {
				return r.GetOveragePolicy() == cyclesv1.CommitOveragePolicy_COMMIT_OVERAGE_POLICY_ALLOW_WITH_OVERDRAFT &&
					r.GetObserveMode() == cyclesv1.ObserveMode_OBSERVE_MODE_OBSERVE
			}},
		{name: "enum by proto name", body: `{"overage_policy":"COMMIT_OVERAGE_POLICY_REJECT"}`, field: "overage_policy", msg: "unknown value"},
		{name: "enum UNSPECIFIED", body: `{"estimate":{"unit":"UNSPECIFIED","amount":1}}`, field: "estimate.unit", msg: "unknown value"},
		{name: "bool as string", body: `{"dry_run":"yes"}`, field: "dry_run", msg: "a boolean"},
		{name: "object as string", body: `{"estimate":"5"}`, field: "estimate", msg: "an object"},
		{name: "list as string", body: `{"action":{"tags":"x"}}`, field: "action.tags", msg: "an array"},
		{name: "amount needs its unit", body: `{"estimate":{"amount":1}}`, field: "estimate.unit", msg: "is required"},
		{name: "amount needs its amount", body: `{"estimate":{"unit":"TOKENS"}}`, field: "estimate.amount", msg: "is required"},
		{name: "empty subject level", body: `{"subject":{"tenant":"acme","workspace":""}}`, field: "subject.workspace", msg: "must not be empty"},
		{name: "null is absent", body: `{"estimate":null,"ttl_ms":null,"metadata":null}`,
			check: func(r *cyclesv1.CreateReservationRequest) bool {
				return r.Estimate == nil && r.TtlMs == nil && r.Metadata == nil
			}},
		{name: "free-form metadata", body: `{"metadata":{"n":1.5,"s":"x","l":[true,null,{"a":2}]}}`,
			check: func(r *cyclesv1.CreateReservationRequest) bool {
				m := r.GetMetadata().AsMap()
				l, _ := m["l"].([]any)
				return m["n"] == 1.5 && m["s"] == "x" && len(l) == 3 && l[0] == true && l[1] == nil
			}},
		{name: "metadata number out of range", body: `{"metadata":{"x":1e400}}`, field: "metadata.x"},
		{name: "map value type", body: `{"subject":{"dimensions":{"a":1}}}`, field: "subject.dimensions.a", msg: "a string"},
		{name: "top level array", body: `[]`, field: "body", msg: "an object"},
		{name: "top level null", body: `null`, check: func(r *cyclesv1.CreateReservationRequest) bool { return r.Estimate == nil }},
		{name: "trailing data", body: `{}{}`, field: "body", msg: "data after"},
		{name: "empty body", body: ``, field: "body", msg: "is empty"},
		{name: "malformed", body: `{"a":`, field: "body", msg: "malformed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, err := decodeReserve(tc.body)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if tc.check != nil && !tc.check(in) {
					t.Fatalf("decoded %v", in)
				}
				return
			}
			wantInvalid(t, err, tc.field, tc.msg)
		})
	}
}
