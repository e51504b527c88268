package admin

import (
	"context"
	"strings"

	pagecursor "github.com/cyclesgo/cycles-go/internal/cursor"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/enumkey"
	"github.com/cyclesgo/cycles-go/internal/keys"
)

// API key listing bounds (admin.proto ListApiKeysRequest).
const (
	DefaultKeyListLimit = 50
	MaxKeyListLimit     = 100
	// keyFilterScan is how many index entries a filtered ListApiKeys call
	// examines per page slot.
	keyFilterScan = 4
)

// keyFilter is the resolved selection of one ListApiKeys call.
type keyFilter struct {
	limit          int
	status, search string
}

// ListApiKeys pages API keys in key id byte order with admin/list_api_keys:
// one script per tenant, in the tenant's slot, that returns public fields only
// (the stored hash never leaves Redis). With tenant_id it lists that tenant
// (unknown is TENANT_NOT_FOUND); without, every tenant's keys in tenant_id then
// key id order, walking the tenant registry (listAllAPIKeys). With a status or
// search filter a call examines at most 4 x limit keys of a tenant, so a page
// may be short, even empty, with has_more set. Cursors are opaque
// (base64url): the last key id examined, or for the all-tenant walk the
// tenant and key reached.
func (s *Service) ListApiKeys(ctx context.Context, req *cyclesv1.ListApiKeysRequest) (*cyclesv1.ListApiKeysResponse, error) {
	f := keyFilter{
		limit:  pageLimit(req.GetLimit(), DefaultKeyListLimit, MaxKeyListLimit),
		status: enumkey.Of(req.GetStatus()), // "" for UNSPECIFIED: any status
		search: keySearch(req.GetSearch()),
	}
	raw, err := pagecursor.Decode("cursor", req.GetCursor())
	if err != nil {
		return nil, err
	}
	tenant := req.GetTenantId()
	if tenant == "" {
		return s.listAllAPIKeys(ctx, f, raw)
	}
	if raw != "" && !isKeyID(raw) {
		return nil, apierr.Invalid("cursor", "is not a cursor of this listing")
	}
	page, err := s.keyPage(ctx, tenant, raw, f.limit, f)
	if err != nil {
		return nil, err
	}
	return &cyclesv1.ListApiKeysResponse{HasMore: page.more, ApiKeys: page.items, NextCursor: page.next(req.GetCursor())}, nil
}

func (s *Service) keyPage(ctx context.Context, tenant, after string, limit int, f keyFilter) (*scanPage[*cyclesv1.ApiKey], error) {
	scan := limit
	if f.status != "" || f.search != "" {
		scan = keyFilterScan * limit
	}
	tk := keys.Tenant(tenant)
	var out keysPage
	if err := scriptListAPIKeys.RunInto(ctx, s.exec, &out, listKeysKeys{tk.Record(), tk.APIKeys(), tk.APIKey("")},
		listKeysArgs{tenant, after, limit, f.status, f.search, scan}); err != nil {
		return nil, err
	}
	res := &scanPage[*cyclesv1.ApiKey]{last: out.Last, more: out.More}
	for _, r := range out.Items {
		k, err := apiKeyFromRecord(r)
		if err != nil {
			return nil, err
		}
		res.items = append(res.items, k)
	}
	return res, nil
}

// listAllAPIKeys walks every tenant's keys (walkTenants), skipping a
// registry id without a tenant record.
func (s *Service) listAllAPIKeys(ctx context.Context, f keyFilter, cursor string) (*cyclesv1.ListApiKeysResponse, error) {
	apiKeys, next, err := walkAll(ctx, s, cursor, f.limit, func(_, m string) bool { return isKeyID(m) },
		func(ctx context.Context, t, after string, room int) (*scanPage[*cyclesv1.ApiKey], error) {
			page, err := s.keyPage(ctx, t, after, room, f)
			if ae, ok := apierr.As(err); ok && ae.Code == apierr.TenantNotFound {
				return nil, nil
			}
			return page, err
		})
	if err != nil {
		return nil, err
	}
	return &cyclesv1.ListApiKeysResponse{ApiKeys: apiKeys, HasMore: next != "", NextCursor: next}, nil
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

// keySearch is the search text of a key listing: a public key id
// (auth.PublicKeyID, what answers show) searches for its local part, which
// is what the listing script matches.
func keySearch(s string) string {
	s = strings.ToLower(s)
	if _, local, ok := auth.SplitKeyID(s); ok {
		return local
	}
	return s
}
