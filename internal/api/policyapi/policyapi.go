// Package policyapi is the gRPC handler of PolicyService. It only delegates
// to internal/policy: the auth interceptor has already required the admin key
// and the validation interceptor has run validate.Message on the request.
package policyapi

import (
	"context"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/policy"
)

type handler struct {
	cyclesv1.UnimplementedPolicyServiceServer
	svc *policy.Service
}

// New returns the PolicyService server backed by svc.
func New(svc *policy.Service) cyclesv1.PolicyServiceServer { return &handler{svc: svc} }

func (h *handler) CreateScopePolicy(ctx context.Context, r *cyclesv1.CreateScopePolicyRequest) (*cyclesv1.CreateScopePolicyResponse, error) {
	return h.svc.CreateScopePolicy(ctx, r)
}

func (h *handler) GetScopePolicy(ctx context.Context, r *cyclesv1.GetScopePolicyRequest) (*cyclesv1.GetScopePolicyResponse, error) {
	return h.svc.GetScopePolicy(ctx, r)
}

func (h *handler) ListScopePolicies(ctx context.Context, r *cyclesv1.ListScopePoliciesRequest) (*cyclesv1.ListScopePoliciesResponse, error) {
	return h.svc.ListScopePolicies(ctx, r)
}

func (h *handler) UpdateScopePolicy(ctx context.Context, r *cyclesv1.UpdateScopePolicyRequest) (*cyclesv1.UpdateScopePolicyResponse, error) {
	return h.svc.UpdateScopePolicy(ctx, r)
}

type counters struct {
	cyclesv1.UnimplementedQuotaCounterServiceServer
	svc *policy.Service
}

// NewQuotaCounters returns the QuotaCounterService server backed by svc.
func NewQuotaCounters(svc *policy.Service) cyclesv1.QuotaCounterServiceServer {
	return &counters{svc: svc}
}

func (h *counters) ListActionQuotaCounters(ctx context.Context, r *cyclesv1.ListActionQuotaCountersRequest) (*cyclesv1.ListActionQuotaCountersResponse, error) {
	return h.svc.ListActionQuotaCounters(ctx, r)
}

func (h *counters) ResetActionQuotaCounter(ctx context.Context, r *cyclesv1.ResetActionQuotaCounterRequest) (*cyclesv1.ResetActionQuotaCounterResponse, error) {
	return h.svc.ResetActionQuotaCounter(ctx, r)
}
