package protowire

import (
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
)

// Event data as the scripts store it (amounts as decimal strings) becomes
// JSON integers on the HTTP wire, exactly, at the top level and in the state
// objects (Event.data's wire option); other members, and caller content
// deeper down, are left alone.
func TestEventDataIntegers(t *testing.T) {
	data := encode[*cyclesv1.Event](ShapeOf("data?"))
	for _, c := range []struct{ name, stored, want string }{
		{"lifecycle", `{"scope":"tenant:a","unit":"TOKENS","operation":"CREDIT","new_state":{"allocated":"1000000","remaining":"9223372036854775807","debt":"0","status":"ACTIVE"},"previous_state":{"spent":"-5"}}`,
			`{"new_state":{"allocated":1000000,"debt":0,"remaining":9223372036854775807,"status":"ACTIVE"},"operation":"CREDIT","previous_state":{"spent":-5},"scope":"tenant:a","unit":"TOKENS"}`},
		{"denied", `{"reason_code":"BUDGET_EXCEEDED","requested_amount":"9007199254740993","remaining":"3","subject":{"agent":"7"}}`,
			`{"reason_code":"BUDGET_EXCEEDED","remaining":3,"requested_amount":9007199254740993,"subject":{"agent":"7"}}`},
		{"numbers", `{"window_seconds":60,"threshold":0.8,"count":2}`, `{"count":2,"threshold":0.8,"window_seconds":60}`},
		{"not an int64", `{"remaining":"12x","debt":"99999999999999999999","ttl_ms":true}`, `{"debt":"99999999999999999999","remaining":"12x","ttl_ms":true}`},
		{"deeper content untouched", `{"metadata":{"remaining":"5"},"new_state":{"inner":{"debt":"1"}}}`, `{"metadata":{"remaining":"5"},"new_state":{"inner":{"debt":"1"}}}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			var s structpb.Struct
			if err := protojson.Unmarshal([]byte(c.stored), &s); err != nil {
				t.Fatal(err)
			}
			got := data(&cyclesv1.Event{Data: &s})
			if got != `{"data":`+c.want+`}` {
				t.Errorf("got  %s\nwant %s", got, c.want)
			}
		})
	}
	if got := data(&cyclesv1.Event{Data: &structpb.Struct{}}); got != `{}` {
		t.Errorf("empty data is omitted: %s", got)
	}
}
