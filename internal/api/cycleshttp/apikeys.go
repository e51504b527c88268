package cycleshttp

import (
	"google.golang.org/protobuf/reflect/protoreflect"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
)

// API-key routes beyond create/list/revoke (admin.go): the partial update
// (AdminService.UpdateApiKey) and key validation (AuthService.Validate).

// PATCH /v1/admin/api-keys/{key_id} reads its body into UpdateApiKeyRequest:
// a member absent (or null) is left as it is. expires_at is cyclesd's
// addition to the spec's body (the spec has a key's expiry immutable; cyclesd
// lets an operator shorten or extend it in place).

// validateShape is the spec's ApiKeyValidationResponse: a valid key's
// answer carries its expiry (neverExpires when it has none) and its
// permissions ([] when none); an invalid one carries neither.
var validateShape = shapeOf("valid", "tenant_id", "key_id?", "permissions", "scope_filter?", "expires_at", "reason?").
	calc("permissions", func(m protoreflect.Message) (any, bool) {
		v := m.Interface().(*cyclesv1.ValidateResponse)
		if p := v.GetPermissions(); p != nil || !v.GetValid() {
			return p, p != nil
		}
		return []string{}, true
	}).
	calc("expires_at", func(m protoreflect.Message) (any, bool) {
		v := m.Interface().(*cyclesv1.ValidateResponse)
		if v.ExpiresAtMs != nil {
			return isoTime(v.GetExpiresAtMs()), v.GetValid()
		}
		return neverExpires, v.GetValid()
	})
