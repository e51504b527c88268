// Package operatorapi is the thin gRPC handler of OperatorService (admin key
// only, per the server's auth rules): bulk actions (internal/bulk).
package operatorapi

import (
	"context"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/bulk"
)

type handler struct {
	cyclesv1.UnimplementedOperatorServiceServer
	bulk *bulk.Service
}

// New returns the OperatorService implementation.
func New(b *bulk.Service) cyclesv1.OperatorServiceServer { return &handler{bulk: b} }

func (h *handler) BulkActionTenants(ctx context.Context, req *cyclesv1.BulkActionTenantsRequest) (*cyclesv1.BulkActionTenantsResponse, error) {
	return h.bulk.Tenants(ctx, req)
}

func (h *handler) BulkActionBudgets(ctx context.Context, req *cyclesv1.BulkActionBudgetsRequest) (*cyclesv1.BulkActionBudgetsResponse, error) {
	return h.bulk.Budgets(ctx, req)
}
