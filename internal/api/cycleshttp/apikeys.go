package cycleshttp

import (
	"context"
	"net/http"
	"time"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
)

// API-key routes beyond create/list/revoke (admin.go): the partial update
// (AdminService.UpdateApiKey) and key validation (AuthService.Validate).

func (a *API) keyRoutes() {
	a.mux.HandleFunc("PATCH /v1/admin/api-keys/{key_id}", a.updateAPIKey)
	a.mux.HandleFunc("POST /v1/auth/validate", a.validateAPIKey)
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

func (a *API) updateAPIKey(w http.ResponseWriter, r *http.Request) {
	tenant, keyID, err := splitKeyID(r.PathValue("key_id"))
	var in apiKeyPatch
	var req any = &cyclesv1.UpdateApiKeyRequest{TenantId: tenant, KeyId: keyID}
	if err == nil {
		req, err = decodeInto(a, w, r, &in, func() (*cyclesv1.UpdateApiKeyRequest, error) {
			out := &cyclesv1.UpdateApiKeyRequest{TenantId: tenant, KeyId: keyID, Name: in.Name, Description: in.Description}
			if in.Permissions != nil {
				out.Permissions = &cyclesv1.ApiKeyStrings{Values: *in.Permissions}
			}
			if in.ScopeFilter != nil {
				out.ScopeFilter = &cyclesv1.ApiKeyStrings{Values: *in.ScopeFilter}
			}
			if in.ExpiresAt != nil {
				t, err := time.Parse(time.RFC3339Nano, *in.ExpiresAt)
				if err != nil {
					return nil, apierr.Invalid("expires_at", "must be an RFC 3339 date-time")
				}
				ms := t.UnixMilli()
				out.ExpiresAtMs = &ms
			}
			if in.Metadata != nil {
				out.Metadata = &cyclesv1.ApiKeyLabels{Values: make(map[string]string, len(*in.Metadata))}
				for k, v := range *in.Metadata {
					sv, ok := v.(string)
					if !ok {
						return nil, apierr.Invalid("metadata."+k, "cyclesd key metadata values are strings")
					}
					out.Metadata.Values[k] = sv
				}
			}
			return out, nil
		})
	}
	a.admin(w, r, cyclesv1.AdminService_UpdateApiKey_FullMethodName, http.StatusOK, req, err,
		func(ctx context.Context, req any) (any, error) {
			return a.adm.UpdateApiKey(ctx, req.(*cyclesv1.UpdateApiKeyRequest))
		},
		func(resp any) any { return apiKeyOf(resp.(*cyclesv1.UpdateApiKeyResponse).GetApiKey(), "", true) })
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

func (a *API) validateAPIKey(w http.ResponseWriter, r *http.Request) {
	if a.auth == nil {
		a.notServed(w, r, "key validation is not enabled on this server")
		return
	}
	var in validateIn
	req, err := decodeInto(a, w, r, &in, func() (*cyclesv1.ValidateRequest, error) {
		return &cyclesv1.ValidateRequest{KeySecret: in.KeySecret}, nil
	})
	a.serve(w, r, route{cyclesv1.AuthService_Validate_FullMethodName, adminPlane, http.StatusOK}, req, err,
		func(ctx context.Context, req any) (any, error) {
			return a.auth.Validate(ctx, req.(*cyclesv1.ValidateRequest))
		},
		func(resp any) any {
			v := resp.(*cyclesv1.ValidateResponse)
			out := &validateOut{Valid: v.GetValid(), TenantID: v.GetTenantId(), Permissions: v.GetPermissions(),
				ScopeFilter: v.GetScopeFilter(), Reason: v.GetReason()}
			out.KeyID = v.GetKeyId()
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
		})
}
