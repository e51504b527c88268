package validate

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
)

func TestEventAndOpsValidators(t *testing.T) {
	i64 := func(v int64) *int64 { return &v }
	cur := cyclesv1.StartPosition_START_POSITION_CURSOR
	cases := []struct {
		name  string
		req   proto.Message
		field string // "" = valid
	}{
		{"watch empty", &cyclesv1.WatchEventsRequest{}, ""},
		{"watch full", &cyclesv1.WatchEventsRequest{TenantId: "acme", EventTypes: []string{"reservation.expired", "custom.x_y"},
			Categories: []string{"budget", "reservation"}, ScopePrefix: "tenant:acme/workspace:prod", Start: cur, Cursor: "MTItMw"}, ""},
		{"watch bad tenant", &cyclesv1.WatchEventsRequest{TenantId: "Acme"}, "tenant_id"},
		{"watch bad type", &cyclesv1.WatchEventsRequest{EventTypes: []string{"Budget Exhausted"}}, "event_types[0]"},
		{"watch empty type", &cyclesv1.WatchEventsRequest{EventTypes: []string{""}}, "event_types[0]"},
		{"watch too many types", &cyclesv1.WatchEventsRequest{EventTypes: make([]string, 65)}, "event_types"},
		{"watch bad category", &cyclesv1.WatchEventsRequest{Categories: []string{"budget", "billing"}}, "categories[1]"},
		{"watch scope control char", &cyclesv1.WatchEventsRequest{ScopePrefix: "tenant:a\n"}, "scope_prefix"},
		{"watch scope too long", &cyclesv1.WatchEventsRequest{ScopePrefix: strings.Repeat("a", 1025)}, "scope_prefix"},
		{"watch unknown start", &cyclesv1.WatchEventsRequest{Start: 9}, "start"},
		{"watch cursor missing", &cyclesv1.WatchEventsRequest{Start: cur}, "cursor"},
		{"watch cursor without start", &cyclesv1.WatchEventsRequest{Cursor: "MTItMw"}, "cursor"},
		{"watch cursor too long", &cyclesv1.WatchEventsRequest{Start: cur, Cursor: strings.Repeat("a", 1025)}, "cursor"},
		{"list empty", &cyclesv1.ListEventsRequest{}, ""},
		{"list window", &cyclesv1.ListEventsRequest{FromMs: i64(1), ToMs: i64(1), Limit: 200, Cursor: "MTItMw"}, ""},
		{"list from after to", &cyclesv1.ListEventsRequest{FromMs: i64(2), ToMs: i64(1)}, "from_ms"},
		{"list negative from", &cyclesv1.ListEventsRequest{FromMs: i64(-1)}, "from_ms"},
		{"list negative to", &cyclesv1.ListEventsRequest{ToMs: i64(-1)}, "to_ms"},
		{"list limit over the max", &cyclesv1.ListEventsRequest{Limit: 201}, ""},
		{"list negative limit", &cyclesv1.ListEventsRequest{Limit: -1}, "limit"},
		{"list bad category", &cyclesv1.ListEventsRequest{Categories: []string{"x"}}, "categories[0]"},
		{"ops status", &cyclesv1.GetSweeperStatusRequest{}, ""},
		{"ops trigger", &cyclesv1.TriggerSweepRequest{}, ""},
	}
	over := &cyclesv1.ListEventsRequest{Limit: 5000}
	if err := Message(over); err != nil || over.GetLimit() != 200 {
		t.Fatalf("limit 5000: %v, served as %d; want 200", err, over.GetLimit())
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { wantField(t, tc.req, tc.field) })
	}
}
