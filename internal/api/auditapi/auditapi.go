// Package auditapi is the gRPC handler of AuditService (admin key only,
// per the server's auth rules): the audit trail's listing (internal/audit).
package auditapi

import (
	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/audit"
)

// handler serves AuditService with internal/audit's own method, which
// carries the RPC's name and types (as adminapi; the Unsafe embedding makes a
// missing method a compile error).
type handler struct {
	cyclesv1.UnsafeAuditServiceServer
	*audit.Service
}

// New returns the AuditService implementation.
func New(a *audit.Service) cyclesv1.AuditServiceServer { return handler{Service: a} }
