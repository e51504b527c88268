// Package eventsapi is the thin gRPC handler of EventService: it takes the
// authenticated principal from the context and delegates to internal/events, which
// decides what the caller may read. On the way out it adds the typed form of
// each event (Typed: EventType and payload), the one place the stored event
// format is converted.
package eventsapi

import (
	"context"

	"google.golang.org/protobuf/proto"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/events"
)

type handler struct {
	cyclesv1.UnimplementedEventServiceServer
	svc *events.Service
}

// New returns the EventService implementation.
func New(svc *events.Service) cyclesv1.EventServiceServer {
	return &handler{svc: svc}
}

func (h *handler) WatchEvents(req *cyclesv1.WatchEventsRequest, stream cyclesv1.EventService_WatchEventsServer) error {
	ctx := stream.Context()
	p, _ := auth.FromContext(ctx)
	if len(req.GetTypes()) > 0 {
		names, err := typeNames(req.GetTypes())
		if err != nil {
			return err
		}
		req = proto.CloneOf(req)
		req.EventTypes = append(req.EventTypes, names...)
	}
	return h.svc.Watch(ctx, p, req, func(res *cyclesv1.WatchEventsResponse) error {
		if ev := res.GetEvent(); ev != nil {
			Typed(ev)
		}
		return stream.Send(res)
	})
}

func (h *handler) ListEvents(ctx context.Context, req *cyclesv1.ListEventsRequest) (*cyclesv1.ListEventsResponse, error) {
	p, _ := auth.FromContext(ctx)
	if len(req.GetTypes()) > 0 {
		names, err := typeNames(req.GetTypes())
		if err != nil {
			return nil, err
		}
		req = proto.CloneOf(req)
		req.EventTypes = append(req.EventTypes, names...)
	}
	res, err := h.svc.List(ctx, p, req)
	if err != nil {
		return nil, err
	}
	for _, ev := range res.GetEvents() {
		Typed(ev)
	}
	return res, nil
}

func (h *handler) GetEvent(ctx context.Context, req *cyclesv1.GetEventRequest) (*cyclesv1.GetEventResponse, error) {
	p, _ := auth.FromContext(ctx)
	res, err := h.svc.Get(ctx, p, req)
	if err != nil {
		return nil, err
	}
	Typed(res.GetEvent())
	return res, nil
}
