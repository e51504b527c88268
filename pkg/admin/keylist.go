package admin

import (
	"context"
	"encoding/base64"
	"strings"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/pkg/apierr"
	"github.com/cyclesgo/cycles-go/pkg/keys"
)

// API key listing bounds (admin.proto ListApiKeysRequest).
const (
	DefaultKeyListLimit = 50
	MaxKeyListLimit     = 100
	// keyFilterScan is how many index entries a filtered ListApiKeys call
	// examines per page slot.
	keyFilterScan = 4
)

// ListApiKeys pages one tenant's API keys (index keys.Tenant.APIKeys) in key
// id byte order with admin/list_api_keys: one script, in the tenant's slot,
// that returns public fields only (the stored hash never leaves Redis).
// Unknown tenant is TENANT_NOT_FOUND. With a status or search filter a call
// examines at most 4 x limit keys, so a page may be short, even empty, with
// has_more set. The cursor is the last key id examined, base64url-encoded.
func (s *Service) ListApiKeys(ctx context.Context, req *cyclesv1.ListApiKeysRequest) (*cyclesv1.ListApiKeysResponse, error) {
	resp, err := s.listAPIKeys(ctx, req)
	if err != nil {
		return nil, s.done(ctx, "ListApiKeys", err)
	}
	return resp, nil
}

func (s *Service) listAPIKeys(ctx context.Context, req *cyclesv1.ListApiKeysRequest) (*cyclesv1.ListApiKeysResponse, error) {
	tenant := req.GetTenantId()
	limit := int(req.GetLimit())
	if limit <= 0 {
		limit = DefaultKeyListLimit
	}
	if limit > MaxKeyListLimit {
		limit = MaxKeyListLimit
	}
	after := ""
	if c := req.GetCursor(); c != "" {
		raw, err := base64.RawURLEncoding.DecodeString(c)
		if err != nil || !isKeyID(string(raw)) {
			return nil, apierr.Invalid("cursor", "is not a cursor of this listing")
		}
		after = string(raw)
	}
	status := ""
	if st := req.GetStatus(); st != cyclesv1.ApiKeyStatus_API_KEY_STATUS_UNSPECIFIED {
		status = strings.TrimPrefix(st.String(), "API_KEY_STATUS_")
	}
	search := strings.ToLower(req.GetSearch())
	scan := limit
	if status != "" || search != "" {
		scan = keyFilterScan * limit
	}
	tk := keys.Tenant(tenant)
	var out struct {
		Items jsonList[record] `json:"items"`
		Last  string           `json:"last"`
		More  bool             `json:"more"`
	}
	if err := s.run(ctx, &out, "list_api_keys", []string{tk.Record(), tk.APIKeys(), tk.APIKey("")},
		tenant, after, limit, status, search, scan); err != nil {
		return nil, err
	}
	resp := &cyclesv1.ListApiKeysResponse{HasMore: out.More}
	for _, r := range out.Items {
		k, err := apiKeyFromRecord(r)
		if err != nil {
			return nil, err
		}
		resp.ApiKeys = append(resp.ApiKeys, k)
	}
	if out.More && out.Last != "" {
		resp.NextCursor = base64.RawURLEncoding.EncodeToString([]byte(out.Last))
	} else if out.More {
		resp.NextCursor = req.GetCursor()
	}
	return resp, nil
}

// isKeyID: a key id as stored, 16 lowercase hex.
func isKeyID(s string) bool {
	if len(s) != 16 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
