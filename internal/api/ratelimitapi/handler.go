// Package ratelimitapi is the thin gRPC handler of cycles.v1.RateLimitService:
// it translates messages to internal/ratelimit calls and back, nothing more.
// Validation happens in the interceptor chain (internal/validate), auth rules in
// internal/server (policy management needs the admin key; Check and Inspect take
// either key).
//
// Tenant callers are confined to their own key namespace
// (ratelimit.CallerKey): a tenant can neither read nor drain another
// tenant's keys, nor the guard's per-API-key state. The admin uses keys as given.
package ratelimitapi

import (
	"context"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/ratelimit"
)

// Handler implements cyclesv1.RateLimitServiceServer.
type Handler struct {
	cyclesv1.UnimplementedRateLimitServiceServer
	limiter *ratelimit.Limiter
}

// New returns the handler over l.
func New(l *ratelimit.Limiter) *Handler { return &Handler{limiter: l} }

var _ cyclesv1.RateLimitServiceServer = (*Handler)(nil)

// Check counts hits (default 1) against the caller's key.
func (h *Handler) Check(ctx context.Context, r *cyclesv1.CheckRequest) (*cyclesv1.CheckResponse, error) {
	key, err := ratelimit.CallerKey(ctx, r.GetKey())
	if err != nil {
		return nil, err
	}
	hits := r.GetHits()
	if hits == 0 {
		hits = 1
	}
	d, err := h.limiter.Check(ctx, r.GetPolicy(), key, hits)
	if err != nil {
		return nil, err
	}
	return &cyclesv1.CheckResponse{
		Allowed: d.Allowed, Count: d.Count, Remaining: d.Remaining, Limit: d.Limit,
		ResetAfterMs: d.ResetAfter.Milliseconds(), RetryAfterMs: d.RetryAfter.Milliseconds(),
		ShadowDenied: d.ShadowDenied,
	}, nil
}

// CreatePolicy stores a new policy (defaults resolved in the response).
func (h *Handler) CreatePolicy(ctx context.Context, r *cyclesv1.CreatePolicyRequest) (*cyclesv1.CreatePolicyResponse, error) {
	p, err := h.limiter.CreatePolicy(ctx, ratelimit.PolicyFromProto(r.GetPolicy()))
	if err != nil {
		return nil, err
	}
	return &cyclesv1.CreatePolicyResponse{Policy: p.Proto()}, nil
}

// UpdatePolicy replaces a policy.
func (h *Handler) UpdatePolicy(ctx context.Context, r *cyclesv1.UpdatePolicyRequest) (*cyclesv1.UpdatePolicyResponse, error) {
	p, err := h.limiter.UpdatePolicy(ctx, ratelimit.PolicyFromProto(r.GetPolicy()))
	if err != nil {
		return nil, err
	}
	return &cyclesv1.UpdatePolicyResponse{Policy: p.Proto()}, nil
}

// DeletePolicy removes a policy.
func (h *Handler) DeletePolicy(ctx context.Context, r *cyclesv1.DeletePolicyRequest) (*cyclesv1.DeletePolicyResponse, error) {
	if err := h.limiter.DeletePolicy(ctx, r.GetName()); err != nil {
		return nil, err
	}
	return &cyclesv1.DeletePolicyResponse{}, nil
}

// GetPolicy reads a policy.
func (h *Handler) GetPolicy(ctx context.Context, r *cyclesv1.GetPolicyRequest) (*cyclesv1.GetPolicyResponse, error) {
	p, err := h.limiter.GetPolicy(ctx, r.GetName())
	if err != nil {
		return nil, err
	}
	return &cyclesv1.GetPolicyResponse{Policy: p.Proto()}, nil
}

// ListPolicies lists every policy by name.
func (h *Handler) ListPolicies(ctx context.Context, _ *cyclesv1.ListPoliciesRequest) (*cyclesv1.ListPoliciesResponse, error) {
	ps, err := h.limiter.ListPolicies(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*cyclesv1.Policy, len(ps))
	for i, p := range ps {
		out[i] = p.Proto()
	}
	return &cyclesv1.ListPoliciesResponse{Policies: out}, nil
}

// Inspect reports one of the caller's keys.
func (h *Handler) Inspect(ctx context.Context, r *cyclesv1.InspectRequest) (*cyclesv1.InspectResponse, error) {
	key, err := ratelimit.CallerKey(ctx, r.GetKey())
	if err != nil {
		return nil, err
	}
	in, err := h.limiter.Inspect(ctx, r.GetPolicy(), key)
	if err != nil {
		return nil, err
	}
	return &cyclesv1.InspectResponse{
		Algorithm: in.Algorithm, Count: in.Count, MemoryUsageBytes: in.MemoryUsageBytes,
		Encoding: in.Encoding, TtlMs: in.TTLms, RedisKey: in.RedisKey,
	}, nil
}
