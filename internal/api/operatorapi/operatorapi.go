// Package operatorapi is the thin gRPC handler of OperatorService (admin key
// only, per the server's auth rules): bulk actions (internal/bulk).
package operatorapi

import (
	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/bulk"
)

// handler serves OperatorService with internal/bulk's own methods, which
// carry the RPCs' names and types (as adminapi; the Unsafe embedding makes a
// missing method a compile error).
type handler struct {
	cyclesv1.UnsafeOperatorServiceServer
	*bulk.Service
}

// New returns the OperatorService implementation.
func New(b *bulk.Service) cyclesv1.OperatorServiceServer { return handler{Service: b} }
