// Package auditapi is the thin gRPC handler of AuditService (admin key only,
// per the server's auth rules): the audit trail's listing (internal/audit).
package auditapi

import (
	"context"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/audit"
)

type handler struct {
	cyclesv1.UnimplementedAuditServiceServer
	audit *audit.Service
}

// New returns the AuditService implementation.
func New(a *audit.Service) cyclesv1.AuditServiceServer {
	return &handler{audit: a}
}

func (h *handler) ListAuditLogs(ctx context.Context, req *cyclesv1.ListAuditLogsRequest) (*cyclesv1.ListAuditLogsResponse, error) {
	return h.audit.List(ctx, req)
}
