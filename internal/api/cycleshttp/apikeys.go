package cycleshttp

import (
	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
)

// API-key routes beyond create/list/revoke (admin.go): the partial update
// (AdminService.UpdateApiKey) and key validation (AuthService.Validate).

func (a *API) keyRoutes() []endpoint {
	return []endpoint{
		on(a, "PATCH /v1/admin/api-keys/{key_id}", cyclesv1.AdminService_UpdateApiKey_FullMethodName,
			via(a.adm, cyclesv1.AdminServiceServer.UpdateApiKey), keyPath(jsonBody((*apiKeyPatch).fill)),
			func(p *cyclesv1.UpdateApiKeyResponse) *apiKeyOut { return apiKeyOf(p.GetApiKey(), "", true) },
			off("the admin service is not enabled on this server")),
		on(a, "POST /v1/auth/validate", cyclesv1.AuthService_Validate_FullMethodName,
			via(a.auth, cyclesv1.AuthServiceServer.Validate), jsonBody((*validateIn).fill), validateOf,
			off("key validation is not enabled on this server")),
	}
}

// apiKeyPatch is the PATCH body: a field absent (or null) is left as it is.
// expires_at is cyclesd's addition to the spec's body (the spec has a key's
// expiry immutable; cyclesd lets an operator shorten or extend it in place).
type apiKeyPatch struct {
	Name        *string         `json:"name"`
	Description *string         `json:"description"`
	Permissions *[]string       `json:"permissions"`
	ScopeFilter *[]string       `json:"scope_filter"`
	ExpiresAt   *string         `json:"expires_at"`
	Metadata    *map[string]any `json:"metadata"`
}

// fill: the key (tenant, key id) comes from the path.
func (in *apiKeyPatch) fill(out *cyclesv1.UpdateApiKeyRequest) error {
	out.Name, out.Description = in.Name, in.Description
	if in.Permissions != nil {
		out.Permissions = &cyclesv1.ApiKeyStrings{Values: *in.Permissions}
	}
	if in.ScopeFilter != nil {
		out.ScopeFilter = &cyclesv1.ApiKeyStrings{Values: *in.ScopeFilter}
	}
	var err error
	if in.ExpiresAt != nil {
		if out.ExpiresAtMs, err = dateTimeMs("expires_at", *in.ExpiresAt); err != nil {
			return err
		}
	}
	if in.Metadata != nil {
		out.Metadata = &cyclesv1.ApiKeyLabels{}
		if out.Metadata.Values, err = keyLabels("metadata", *in.Metadata); err != nil {
			return err
		}
	}
	return nil
}

type validateIn struct {
	KeySecret string `json:"key_secret"`
}

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

func (in *validateIn) fill(out *cyclesv1.ValidateRequest) error {
	out.KeySecret = in.KeySecret
	return nil
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
