// Package usageapi is the gRPC UsageService: a thin adapter over internal/usage.
package usageapi

import (
	"context"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/usage"
)

type handler struct {
	cyclesv1.UnimplementedUsageServiceServer
	svc *usage.Service
}

// New returns the UsageService server backed by svc.
func New(svc *usage.Service) cyclesv1.UsageServiceServer { return &handler{svc: svc} }

func (h *handler) QueryUsage(ctx context.Context, r *cyclesv1.QueryUsageRequest) (*cyclesv1.QueryUsageResponse, error) {
	return h.svc.Query(ctx, r)
}
