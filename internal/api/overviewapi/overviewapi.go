// Package overviewapi is the gRPC handler of OverviewService. It only
// delegates to internal/overview (the auth interceptor has already required
// the admin key) and types the recent events as every event RPC does.
package overviewapi

import (
	"context"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/api/eventsapi"
	"github.com/cyclesgo/cycles-go/internal/overview"
)

type handler struct {
	cyclesv1.UnimplementedOverviewServiceServer
	svc *overview.Service
}

// New returns the OverviewService server backed by svc.
func New(svc *overview.Service) cyclesv1.OverviewServiceServer { return &handler{svc: svc} }

func (h *handler) GetOverview(ctx context.Context, _ *cyclesv1.GetOverviewRequest) (*cyclesv1.GetOverviewResponse, error) {
	resp, err := h.svc.Get(ctx)
	if err != nil {
		return nil, err
	}
	for _, ev := range resp.GetRecentDenials() {
		eventsapi.Typed(ev)
	}
	for _, ev := range resp.GetRecentExpiries() {
		eventsapi.Typed(ev)
	}
	return resp, nil
}
