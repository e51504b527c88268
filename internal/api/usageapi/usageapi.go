// Package usageapi is the gRPC UsageService: a thin adapter over internal/usage.
package usageapi

import (
	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/usage"
)

// handler serves UsageService with internal/usage's own method, which
// carries the RPC's name and types (as adminapi; the Unsafe embedding makes a
// missing method a compile error).
type handler struct {
	cyclesv1.UnsafeUsageServiceServer
	*usage.Service
}

// New returns the UsageService server backed by svc.
func New(svc *usage.Service) cyclesv1.UsageServiceServer { return handler{Service: svc} }
