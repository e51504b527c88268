package cycleshttp

import (
	"google.golang.org/protobuf/reflect/protoreflect"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
)

// Event reads (governance spec: GET /v1/events for a tenant key, GET
// /v1/admin/events for the admin key), both over EventService.ListEvents,
// which decides what the caller may see. The webhook routes answer as a server
// without subscriptions (webhooks.go).

func eventWindow(req *cyclesv1.ListEventsRequest) error {
	return window("from", "to", req.FromMs, req.ToMs)
}

// envelopeShape is the protocol's Event envelope. The actor is omitted when
// it has no type; data's integer members are exact JSON integers
// (eventDataOf).
var envelopeShape = shapeOf("event_id", "event_type", "category", "timestamp", "tenant_id", "scope?", "actor?", "source",
	"data?", "request_id?", "trace_id?", "correlation_id?").
	calc("actor", func(m protoreflect.Message) (any, bool) {
		act := m.Interface().(*cyclesv1.Event).GetActor()
		return actorShape.json(act.ProtoReflect()), act.GetType() != ""
	}).
	with("data", item(eventDataOf))

var actorShape = shapeOf("type", "key_id?")
