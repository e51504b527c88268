package cycleshttp

import (
	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
)

// API-key routes beyond create/list/revoke (admin.go): the partial update
// (AdminService.UpdateApiKey) and key validation (AuthService.Validate).

func (a *API) keyRoutes() []endpoint {
	return []endpoint{
		on(a, "PATCH /v1/admin/api-keys/{key_id}", cyclesv1.AdminService_UpdateApiKey_FullMethodName,
			via(a.adm, cyclesv1.AdminServiceServer.UpdateApiKey), keyPath(protoJSON[*cyclesv1.UpdateApiKeyRequest]),
			func(p *cyclesv1.UpdateApiKeyResponse) *apiKeyOut { return apiKeyOf(p.GetApiKey(), "", true) },
			off("the admin service is not enabled on this server")),
		on(a, "POST /v1/auth/validate", cyclesv1.AuthService_Validate_FullMethodName,
			via(a.auth, cyclesv1.AuthServiceServer.Validate), protoJSON, validateOf,
			off("key validation is not enabled on this server")),
	}
}

// PATCH /v1/admin/api-keys/{key_id} reads its body into UpdateApiKeyRequest:
// a member absent (or null) is left as it is. expires_at is cyclesd's
// addition to the spec's body (the spec has a key's expiry immutable; cyclesd
// lets an operator shorten or extend it in place).

// validateOut is the spec's ApiKeyValidationResponse.
type validateOut struct {
	Valid       bool     `json:"valid"`
	TenantID    string   `json:"tenant_id"`
	KeyID       string   `json:"key_id,omitempty"`
	Permissions []string `json:"permissions,omitempty"`
	ScopeFilter []string `json:"scope_filter,omitempty"`
	ExpiresAt   string   `json:"expires_at,omitempty"`
	Reason      string   `json:"reason,omitempty"`
}

func validateOf(v *cyclesv1.ValidateResponse) *validateOut {
	out := &validateOut{Valid: v.GetValid(), TenantID: v.GetTenantId(), KeyID: v.GetKeyId(), Permissions: v.GetPermissions(),
		ScopeFilter: v.GetScopeFilter(), Reason: v.GetReason()}
	if v.GetValid() {
		out.ExpiresAt = neverExpires
		if v.ExpiresAtMs != nil {
			out.ExpiresAt = isoTime(v.GetExpiresAtMs())
		}
		if out.Permissions == nil {
			out.Permissions = []string{}
		}
	}
	return out
}
