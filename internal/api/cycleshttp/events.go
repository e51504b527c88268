package cycleshttp

import (
	"context"

	"google.golang.org/protobuf/reflect/protoreflect"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
)

// Event reads (governance spec: GET /v1/events for a tenant key, GET
// /v1/admin/events for the admin key), both over EventService.ListEvents,
// which decides what the caller may see. The webhook routes answer as a server
// without subscriptions (webhooks.go).

func (a *API) eventRoutes() []endpoint {
	ev, offEvents := a.svc.Events, off("the event service is not enabled on this server")
	filters := query(qf("scope", "scope_prefix"), q("cursor"), qf("event_type", "event_types"), qf("category", "categories"),
		qf("correlation_id", "correlation_id"),
		qf("from", "from_ms"), qf("to", "to_ms"), q("limit"))
	eventPage := page("events", nil).nest("events", envelopeShape)
	return []endpoint{
		on(a, "GET /v1/events", keyOnly(false, via(ev, cyclesv1.EventServiceServer.ListEvents)), check(eventWindow), eventPage, offEvents, filters),
		on(a, "GET /v1/admin/events", keyOnly(true, via(ev, cyclesv1.EventServiceServer.ListEvents)), check(eventWindow), eventPage, offEvents, filters,
			query(q("tenant_id"))),
		// The event id names its tenant, so no tenant_id is needed (an optional
		// tenant_id still reads events written before ids named their tenant;
		// docs/http-api.md). The answer is the envelope or 404 EVENT_NOT_FOUND.
		on(a, "GET /v1/admin/events/{event_id}", keyOnly(true, via(ev, cyclesv1.EventServiceServer.GetEvent)), nil,
			envelopeShape.of("event"), offEvents, query(q("tenant_id"))),
	}
}

func eventWindow(req *cyclesv1.ListEventsRequest) error {
	return window("from", "to", req.FromMs, req.ToMs)
}

// keyOnly admits only the admin key (admin) or only a tenant key: the event
// routes of the two planes share one method, which either key may call.
func keyOnly[Req, Resp any](admin bool, call func(context.Context, Req) (Resp, error)) func(context.Context, Req) (Resp, error) {
	if call == nil {
		return nil
	}
	return func(ctx context.Context, req Req) (Resp, error) {
		var zero Resp
		p, _ := auth.FromContext(ctx)
		if admin && !p.Admin {
			return zero, apierr.New(apierr.Unauthorized, "this endpoint needs the admin key (X-Admin-API-Key)")
		}
		if !admin && p.Admin {
			return zero, apierr.New(apierr.Unauthorized, "this endpoint needs a tenant API key; the admin reads GET /v1/admin/events")
		}
		return call(ctx, req)
	}
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
