// Package policyapi is the gRPC handler of PolicyService. It only delegates
// to internal/policy: the auth interceptor has already required the admin key
// and the validation interceptor has run validate.Message on the request.
package policyapi

import (
	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/policy"
)

// handler and counters serve PolicyService and QuotaCounterService with
// internal/policy's own methods, which carry the RPCs' names and types (see
// adminapi: the Unsafe embedding makes a missing method a compile error).
type handler struct {
	cyclesv1.UnsafePolicyServiceServer
	*policy.Service
}

// New returns the PolicyService server backed by svc.
func New(svc *policy.Service) cyclesv1.PolicyServiceServer { return handler{Service: svc} }

type counters struct {
	cyclesv1.UnsafeQuotaCounterServiceServer
	*policy.Service
}

// NewQuotaCounters returns the QuotaCounterService server backed by svc.
func NewQuotaCounters(svc *policy.Service) cyclesv1.QuotaCounterServiceServer {
	return counters{Service: svc}
}
