package validate

import (
	"testing"

	"google.golang.org/protobuf/proto"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
)

func TestTypedEventFilter(t *testing.T) {
	funded := cyclesv1.EventType_EVENT_TYPE_BUDGET_FUNDED
	cases := []struct {
		name  string
		req   proto.Message
		field string // "" = valid
	}{
		{"watch typed", &cyclesv1.WatchEventsRequest{Types: []cyclesv1.EventType{funded}}, ""},
		{"list typed", &cyclesv1.ListEventsRequest{Types: []cyclesv1.EventType{funded, cyclesv1.EventType_EVENT_TYPE_TENANT_CLOSED}}, ""},
		{"watch unspecified", &cyclesv1.WatchEventsRequest{Types: []cyclesv1.EventType{funded, 0}}, "types[1]"},
		{"list unknown number", &cyclesv1.ListEventsRequest{Types: []cyclesv1.EventType{999}}, "types[0]"},
		{"watch too many", &cyclesv1.WatchEventsRequest{Types: make([]cyclesv1.EventType, 65)}, "types"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { wantField(t, tc.req, tc.field) })
	}
}
