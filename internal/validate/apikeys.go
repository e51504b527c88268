package validate

import (
	"fmt"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/permission"
	"github.com/cyclesgo/cycles-go/internal/scopefilter"
)

func init() {
	register(func(r *cyclesv1.UpdateApiKeyRequest) error {
		if err := first(
			TenantID("tenant_id", r.GetTenantId()),
			keyID("key_id", r.GetKeyId()),
			Text("name", r.GetName(), adminMaxName),
			Text("description", r.GetDescription(), 1024),
		); err != nil {
			return err
		}
		if i, err := permission.Check(r.GetPermissions().GetValues()); err != nil {
			return invalid(fmt.Sprintf("permissions[%d]", i), "%v", err)
		}
		if _, i, err := scopefilter.Check(r.GetTenantId(), r.GetScopeFilter().GetValues()); err != nil {
			return invalid(fmt.Sprintf("scope_filter[%d]", i), "%v", err)
		}
		if r.ExpiresAtMs != nil && r.GetExpiresAtMs() <= 0 {
			return invalid("expires_at", "must be a time in the future")
		}
		return StringMap("metadata", r.GetMetadata().GetValues())
	})
	// The key is the question: a malformed one is an answer (valid=false),
	// so only its size is bounded here.
	register(func(r *cyclesv1.ValidateRequest) error {
		if r.GetKeySecret() == "" {
			return invalid("key_secret", "is required")
		}
		if len(r.GetKeySecret()) > 256 {
			return invalid("key_secret", "is at most 256 characters")
		}
		return nil
	})
}

// keyID checks a key id: the public "<tenant>_<16 lowercase hex>" both
// wires answer with (auth.PublicKeyID), or its 16 hex alone. A public id of
// another tenant's key is well formed: the admin plane answers it
// KEY_NOT_FOUND, like any key the tenant does not hold.
func keyID(field, id string) error {
	if id == "" {
		return invalid(field, "is required")
	}
	if !auth.ValidKeyID(id) {
		return invalid(field, "must be a key id (<tenant>_<%d lowercase hex>, or the %d hex alone)", adminKeyIDLen, adminKeyIDLen)
	}
	return nil
}
