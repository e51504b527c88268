package admin

import (
	"context"
	"slices"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/auth"
)

// Validate reasons (ValidateResponse.reason). An unknown key and a wrong
// secret for a known key id both answer NOT_FOUND, so the answer tells the
// asker no more than authentication would.
var validateReasons = map[string]string{
	authMalformed:     "MALFORMED",
	authUnknownKey:    "NOT_FOUND",
	authHashMismatch:  "NOT_FOUND",
	authRevoked:       "REVOKED",
	authTenantMissing: "TENANT_NOT_FOUND",
	authExpired:       "EXPIRED",
}

// ValidateApiKey answers whether a presented key authenticates now (read
// from the store, not from this replica's cache) and as what. A key of a
// SUSPENDED or CLOSED tenant is answered invalid with TENANT_SUSPENDED /
// TENANT_CLOSED, as the governance spec's check list has it, although such a
// key still authenticates for reads here. An invalid key is an answer, not
// an error; only the store failing is.
func (s *Service) ValidateApiKey(ctx context.Context, presented string) (*cyclesv1.ValidateResponse, error) {
	pk, ok := auth.ParseAPIKey(presented)
	if !ok {
		return &cyclesv1.ValidateResponse{Reason: validateReasons[authMalformed]}, nil
	}
	v, err := s.readKey(ctx, pk, auth.HashSecret(presented))
	if err != nil {
		return nil, err
	}
	out := &cyclesv1.ValidateResponse{TenantId: pk.Tenant}
	switch {
	case v.reason != "":
		out.Reason = validateReasons[v.reason]
	case v.tenantStatus == "SUSPENDED" || v.tenantStatus == "CLOSED":
		out.Reason = "TENANT_" + v.tenantStatus
	default:
		out.Valid = true
		out.KeyId = auth.PublicKeyID(pk.Tenant, pk.KeyID)
		out.Permissions = slices.Clone(v.p.Permissions)
		out.ScopeFilter = slices.Clone(v.p.ScopeFilter)
		if v.p.ExpiresAtMs != 0 {
			out.ExpiresAtMs = &v.p.ExpiresAtMs
		}
	}
	return out, nil
}
