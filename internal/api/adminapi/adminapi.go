// Package adminapi is the gRPC handler of AdminService. It only delegates to
// internal/admin: the auth interceptor has already required the admin key and the
// validation interceptor has already run validate.Message on the request;
// errors are *apierr.Error, mapped to a status by the interceptor chain.
package adminapi

import (
	"context"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/admin"
)

type handler struct {
	cyclesv1.UnimplementedAdminServiceServer
	svc *admin.Service
}

// New returns the AdminService server backed by svc.
func New(svc *admin.Service) cyclesv1.AdminServiceServer { return &handler{svc: svc} }

func (h *handler) CreateTenant(ctx context.Context, r *cyclesv1.CreateTenantRequest) (*cyclesv1.CreateTenantResponse, error) {
	return h.svc.CreateTenant(ctx, r)
}

func (h *handler) GetTenant(ctx context.Context, r *cyclesv1.GetTenantRequest) (*cyclesv1.GetTenantResponse, error) {
	return h.svc.GetTenant(ctx, r)
}

func (h *handler) ListTenants(ctx context.Context, r *cyclesv1.ListTenantsRequest) (*cyclesv1.ListTenantsResponse, error) {
	return h.svc.ListTenants(ctx, r)
}

func (h *handler) UpdateTenant(ctx context.Context, r *cyclesv1.UpdateTenantRequest) (*cyclesv1.UpdateTenantResponse, error) {
	return h.svc.UpdateTenant(ctx, r)
}

func (h *handler) CloseTenant(ctx context.Context, r *cyclesv1.CloseTenantRequest) (*cyclesv1.CloseTenantResponse, error) {
	return h.svc.CloseTenant(ctx, r)
}

func (h *handler) CreateApiKey(ctx context.Context, r *cyclesv1.CreateApiKeyRequest) (*cyclesv1.CreateApiKeyResponse, error) {
	return h.svc.CreateApiKey(ctx, r)
}

func (h *handler) ListApiKeys(ctx context.Context, r *cyclesv1.ListApiKeysRequest) (*cyclesv1.ListApiKeysResponse, error) {
	return h.svc.ListApiKeys(ctx, r)
}

func (h *handler) RevokeApiKey(ctx context.Context, r *cyclesv1.RevokeApiKeyRequest) (*cyclesv1.RevokeApiKeyResponse, error) {
	return h.svc.RevokeApiKey(ctx, r)
}

func (h *handler) UpdateApiKey(ctx context.Context, r *cyclesv1.UpdateApiKeyRequest) (*cyclesv1.UpdateApiKeyResponse, error) {
	return h.svc.UpdateApiKey(ctx, r)
}

func (h *handler) CreateBudget(ctx context.Context, r *cyclesv1.CreateBudgetRequest) (*cyclesv1.CreateBudgetResponse, error) {
	return h.svc.CreateBudget(ctx, r)
}

func (h *handler) GetBudget(ctx context.Context, r *cyclesv1.GetBudgetRequest) (*cyclesv1.GetBudgetResponse, error) {
	return h.svc.GetBudget(ctx, r)
}

func (h *handler) ListBudgets(ctx context.Context, r *cyclesv1.ListBudgetsRequest) (*cyclesv1.ListBudgetsResponse, error) {
	return h.svc.ListBudgets(ctx, r)
}

func (h *handler) FundBudget(ctx context.Context, r *cyclesv1.FundBudgetRequest) (*cyclesv1.FundBudgetResponse, error) {
	return h.svc.FundBudget(ctx, r)
}

func (h *handler) UpdateBudget(ctx context.Context, r *cyclesv1.UpdateBudgetRequest) (*cyclesv1.UpdateBudgetResponse, error) {
	return h.svc.UpdateBudget(ctx, r)
}

func (h *handler) FreezeBudget(ctx context.Context, r *cyclesv1.FreezeBudgetRequest) (*cyclesv1.FreezeBudgetResponse, error) {
	return h.svc.FreezeBudget(ctx, r)
}

func (h *handler) UnfreezeBudget(ctx context.Context, r *cyclesv1.UnfreezeBudgetRequest) (*cyclesv1.UnfreezeBudgetResponse, error) {
	return h.svc.UnfreezeBudget(ctx, r)
}

func (h *handler) CloseBudget(ctx context.Context, r *cyclesv1.CloseBudgetRequest) (*cyclesv1.CloseBudgetResponse, error) {
	return h.svc.CloseBudget(ctx, r)
}
