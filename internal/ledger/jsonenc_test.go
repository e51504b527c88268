package ledger

import (
	"encoding/json"
	"reflect"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
)

var jsonCorpus = []proto.Message{
	&cyclesv1.Subject{},
	&cyclesv1.Subject{Tenant: "acme", Workspace: "prod", Agent: "bot"},
	&cyclesv1.Subject{Tenant: "t", Workspace: "w", App: "a", Workflow: "f", Agent: "g", Toolset: "s",
		Dimensions: map[string]string{"run_id": "42", "cost_center": "eng \"core\"", "z": "ünïcödé ☃", "a": "tab\tnew\nline\x01\\"}},
	&cyclesv1.Action{},
	&cyclesv1.Action{Kind: "llm.completion", Name: "openai:gpt-4o-mini"},
	&cyclesv1.Action{Kind: "tool", Name: "<script>&amp;</script>", Tags: []string{"a", "b \"q\"", "\u2028"}},
	&cyclesv1.Action{Kind: "x", Tags: []string{""}},
}

// The direct encoder produces the same JSON value as protojson, and
// protojson reads it back to the same message.
func TestDirectJSONMatchesProtojson(t *testing.T) {
	for _, m := range jsonCorpus {
		fast, ok := fastJSONOf(m)
		if !ok {
			t.Fatalf("%v: declined", m)
		}
		want, err := jsonOut.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var a, b any
		if err := json.Unmarshal([]byte(fast), &a); err != nil {
			t.Fatalf("%v: invalid JSON %s: %v", m, fast, err)
		}
		if err := json.Unmarshal(want, &b); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("%v:\n direct    %s\n protojson %s", m, fast, want)
		}
		back := m.ProtoReflect().New().Interface()
		if err := protojson.Unmarshal([]byte(fast), back); err != nil || !proto.Equal(back, m) {
			t.Fatalf("%v: round trip %v (%v)", m, back, err)
		}
	}
}

// Invalid UTF-8 is left to protojson, which refuses it as before.
func TestDirectJSONDeclinesInvalidUTF8(t *testing.T) {
	m := &cyclesv1.Action{Kind: "k", Name: "bad \xff"}
	if _, ok := fastJSONOf(m); ok {
		t.Fatal("invalid UTF-8 accepted")
	}
	if _, err := jsonOf(m); err == nil {
		t.Fatal("jsonOf accepted invalid UTF-8")
	}
}

func FuzzDirectJSON(f *testing.F) {
	f.Add("acme", "prod", "bot", "llm", "gpt", "tag", "k", "v")
	f.Fuzz(func(t *testing.T, tenant, ws, agent, kind, name, tag, dk, dv string) {
		for _, m := range []proto.Message{
			&cyclesv1.Subject{Tenant: tenant, Workspace: ws, Agent: agent, Dimensions: map[string]string{dk: dv}},
			&cyclesv1.Action{Kind: kind, Name: name, Tags: []string{tag, name}},
		} {
			want, werr := jsonOut.Marshal(m)
			fast, ok := fastJSONOf(m)
			if !ok {
				if werr == nil {
					t.Fatalf("%v: declined but protojson encodes it", m)
				}
				continue
			}
			if werr != nil {
				t.Fatalf("%v: encoded what protojson refuses (%v)", m, werr)
			}
			var a, b any
			if json.Unmarshal([]byte(fast), &a) != nil || json.Unmarshal(want, &b) != nil || !reflect.DeepEqual(a, b) {
				t.Fatalf("%v:\n direct    %s\n protojson %s", m, fast, want)
			}
		}
	})
}
