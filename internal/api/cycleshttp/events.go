package cycleshttp

import (
	"context"
	"net/http"
	"net/url"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
)

// Event reads (governance spec: GET /v1/events for a tenant key, GET
// /v1/admin/events for the admin key), both over EventService.ListEvents,
// which decides what the caller may see. The webhook routes answer as a server
// without subscriptions (webhooks.go).

func (a *API) eventRoutes() {
	a.mux.HandleFunc("GET /v1/events", a.listTenantEvents)
	a.mux.HandleFunc("GET /v1/admin/events", a.listAdminEvents)
	a.mux.HandleFunc("GET /v1/admin/events/{event_id}", a.getAdminEvent)
}

type actorOut struct {
	Type  string `json:"type"`
	KeyID string `json:"key_id,omitempty"`
}

type eventEnvelopeOut struct {
	EventID   string         `json:"event_id"`
	EventType string         `json:"event_type"`
	Category  string         `json:"category"`
	Timestamp string         `json:"timestamp"`
	TenantID  string         `json:"tenant_id"`
	Scope     string         `json:"scope,omitempty"`
	Actor     *actorOut      `json:"actor,omitempty"`
	Source    string         `json:"source"`
	Data      map[string]any `json:"data,omitempty"`
	RequestID string         `json:"request_id,omitempty"`
	TraceID   string         `json:"trace_id,omitempty"`
}

type eventListOut struct {
	Events     []eventEnvelopeOut `json:"events"`
	NextCursor string             `json:"next_cursor,omitempty"`
	HasMore    bool               `json:"has_more"`
}

func eventListOf(l *cyclesv1.ListEventsResponse) *eventListOut {
	out := &eventListOut{Events: make([]eventEnvelopeOut, 0, len(l.GetEvents())), NextCursor: l.GetNextCursor(), HasMore: l.GetHasMore()}
	for _, e := range l.GetEvents() {
		out.Events = append(out.Events, envelopeOf(e))
	}
	return out
}

// envelopeOf is the protocol's Event envelope of one event.
func envelopeOf(e *cyclesv1.Event) eventEnvelopeOut {
	ev := eventEnvelopeOut{EventID: e.GetEventId(), EventType: e.GetEventType(), Category: e.GetCategory(),
		Timestamp: isoTime(e.GetTimestampMs()), TenantID: e.GetTenantId(), Scope: e.GetScope(), Source: e.GetSource(),
		Data: eventDataOf(e.GetData()), RequestID: e.GetRequestId(), TraceID: e.GetTraceId()}
	if act := e.GetActor(); act != nil && act.GetType() != "" {
		ev.Actor = &actorOut{Type: act.GetType()}
		if act.GetKeyId() != "" {
			ev.Actor.KeyID = act.GetKeyId()
		}
	}
	return ev
}

// eventsRequest reads the list filters shared by both routes.
func eventsRequest(q url.Values) (*cyclesv1.ListEventsRequest, error) {
	req := &cyclesv1.ListEventsRequest{ScopePrefix: q.Get("scope"), Cursor: q.Get("cursor")}
	if s := q.Get("event_type"); s != "" {
		req.EventTypes = []string{s}
	}
	if s := q.Get("category"); s != "" {
		req.Categories = []string{s}
	}
	if q.Get("correlation_id") != "" {
		return nil, apierr.Invalid("correlation_id", "cyclesd events carry no correlation id; filter by event_type, scope or time")
	}
	var err error
	if req.FromMs, err = timeParam(q, "from"); err != nil {
		return nil, err
	}
	if req.ToMs, err = timeParam(q, "to"); err != nil {
		return nil, err
	}
	if req.FromMs != nil && req.ToMs != nil && *req.FromMs > *req.ToMs {
		return nil, apierr.Invalid("from", "is after to")
	}
	if req.Limit, err = limitParam(q); err != nil {
		return nil, err
	}
	return req, nil
}

func (a *API) listEvents(w http.ResponseWriter, r *http.Request, wantAdmin bool) {
	if a.ev == nil {
		a.notServed(w, r, "the event service is not enabled on this server")
		return
	}
	q := r.URL.Query()
	req, err := eventsRequest(q)
	if err == nil && wantAdmin {
		req.TenantId = q.Get("tenant_id")
	}
	a.serve(w, r, route{cyclesv1.EventService_ListEvents_FullMethodName, adminPlane, http.StatusOK}, req, err,
		func(ctx context.Context, req any) (any, error) {
			p, _ := auth.FromContext(ctx)
			if wantAdmin && !p.Admin {
				return nil, apierr.New(apierr.Unauthorized, "this endpoint needs the admin key (X-Admin-API-Key)")
			}
			if !wantAdmin && p.Admin {
				return nil, apierr.New(apierr.Unauthorized, "this endpoint needs a tenant API key; the admin reads GET /v1/admin/events")
			}
			return a.ev.ListEvents(ctx, req.(*cyclesv1.ListEventsRequest))
		},
		func(resp any) any { return eventListOf(resp.(*cyclesv1.ListEventsResponse)) })
}

func (a *API) listTenantEvents(w http.ResponseWriter, r *http.Request) { a.listEvents(w, r, false) }
func (a *API) listAdminEvents(w http.ResponseWriter, r *http.Request)  { a.listEvents(w, r, true) }

// getAdminEvent serves GET /v1/admin/events/{event_id} over
// EventService.GetEvent: the event id names its tenant, so no tenant_id is
// needed (an optional tenant_id still reads events written before ids named
// their tenant; docs/http-api.md). The answer is the event's envelope or 404
// EVENT_NOT_FOUND.
func (a *API) getAdminEvent(w http.ResponseWriter, r *http.Request) {
	if a.ev == nil {
		a.notServed(w, r, "the event service is not enabled on this server")
		return
	}
	req := &cyclesv1.GetEventRequest{TenantId: r.URL.Query().Get("tenant_id"), EventId: r.PathValue("event_id")}
	a.serve(w, r, route{cyclesv1.EventService_GetEvent_FullMethodName, adminPlane, http.StatusOK}, req, nil,
		func(ctx context.Context, req any) (any, error) {
			if p, _ := auth.FromContext(ctx); !p.Admin {
				return nil, apierr.New(apierr.Unauthorized, "this endpoint needs the admin key (X-Admin-API-Key)")
			}
			return a.ev.GetEvent(ctx, req.(*cyclesv1.GetEventRequest))
		},
		func(resp any) any { return envelopeOf(resp.(*cyclesv1.GetEventResponse).GetEvent()) })
}
