// Package eventsapi is the thin gRPC handler of EventService: it takes the
// authenticated principal from the context and delegates to pkg/events, which
// decides what the caller may read.
package eventsapi

import (
	"context"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/pkg/auth"
	"github.com/cyclesgo/cycles-go/pkg/events"
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
	return h.svc.Watch(ctx, p, req, stream.Send)
}

func (h *handler) ListEvents(ctx context.Context, req *cyclesv1.ListEventsRequest) (*cyclesv1.ListEventsResponse, error) {
	p, _ := auth.FromContext(ctx)
	return h.svc.List(ctx, p, req)
}
