package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/permission"
	"github.com/cyclesgo/cycles-go/internal/scopefilter"
)

// UpdateApiKey changes the fields req sets on an ACTIVE key, in one script
// that also writes the call's audit entry. Unknown is KEY_NOT_FOUND; a
// REVOKED or expired key is INVALID_STATE. Like RevokeApiKey it drops the key
// from every replica's verified-key cache (InvalidateKey), so the change
// governs the key's next call everywhere.
func (s *Service) UpdateApiKey(ctx context.Context, req *cyclesv1.UpdateApiKeyRequest) (*cyclesv1.UpdateApiKeyResponse, error) {
	tenant := req.GetTenantId()
	keyID, err := storedKeyID(tenant, req.GetKeyId())
	if err != nil {
		return nil, err
	}
	args, err := keyUpdateArgs(tenant, req)
	if err != nil {
		return nil, err
	}
	tk := keys.Tenant(tenant)
	var rec record
	s.keys.drop(tenant, keyID)
	err = scriptUpdateAPIKey.RunInto(ctx, s.exec, &rec, keyEventKeys{tk.APIKey(keyID), tk.Events()},
		updateKeyArgs{tenant, keyID, s.eventContext(ctx), args})
	// As in RevokeApiKey: drop again after the script and tell the other
	// replicas, even if the script failed (it may have committed).
	_ = s.InvalidateKey(context.WithoutCancel(ctx), tenant, keyID)
	if err != nil {
		return nil, err
	}
	k, err := apiKeyFromRecord(rec)
	if err != nil {
		return nil, err
	}
	return &cyclesv1.UpdateApiKeyResponse{ApiKey: k}, nil
}

// keyUpdateArgs checks and encodes the fields req sets as the script's
// field, value pairs (” removes a field).
func keyUpdateArgs(tenant string, req *cyclesv1.UpdateApiKeyRequest) ([]any, error) {
	var args []any
	add := func(field, v string) { args = append(args, field, v) }
	if req.Name != nil {
		add("name", req.GetName())
	}
	if req.Description != nil {
		add("description", req.GetDescription())
	}
	if req.GetPermissions() != nil {
		ps := req.GetPermissions().GetValues()
		if i, err := permission.Check(ps); err != nil {
			return nil, apierr.Invalid(fmt.Sprintf("permissions[%d]", i), "%v", err)
		}
		if ps == nil {
			ps = []string{} // an empty set grants nothing; it is not "absent" (= legacy)
		}
		b, err := json.Marshal(ps)
		if err != nil {
			return nil, fmt.Errorf("encode permissions: %w", err)
		}
		add("permissions", string(b))
	}
	if req.GetScopeFilter() != nil {
		filter, i, err := scopefilter.Check(tenant, req.GetScopeFilter().GetValues())
		if err != nil {
			return nil, apierr.Invalid(fmt.Sprintf("scope_filter[%d]", i), "%v", err)
		}
		v := ""
		if len(filter) > 0 {
			b, err := json.Marshal(filter)
			if err != nil {
				return nil, fmt.Errorf("encode scope filter: %w", err)
			}
			v = string(b)
		}
		add("scope_filter", v)
	}
	if req.ExpiresAtMs != nil {
		add("expires_at", strconv.FormatInt(req.GetExpiresAtMs(), 10))
	}
	if req.GetMetadata() != nil {
		v := ""
		if len(req.GetMetadata().GetValues()) > 0 {
			b, err := json.Marshal(req.GetMetadata().GetValues())
			if err != nil {
				return nil, fmt.Errorf("encode metadata: %w", err)
			}
			v = string(b)
		}
		add("metadata", v)
	}
	if len(args) == 0 {
		return nil, apierr.Invalid("update", "names no field to change")
	}
	return args, nil
}
