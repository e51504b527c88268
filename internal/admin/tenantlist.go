package admin

import (
	"context"
	"strings"

	pagecursor "github.com/cyclesgo/cycles-go/internal/cursor"

	"golang.org/x/sync/errgroup"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/sweeper"
)

// Tenant listing bounds (admin.proto ListTenantsRequest).
const (
	DefaultTenantListLimit = 50
	MaxTenantListLimit     = 100
	// tenantFilterScan is how many registry entries a filtered ListTenants
	// call examines per page slot (a page of n examines at most 4n tenants).
	tenantFilterScan = 4
	// tenantReadConcurrency bounds the record reads in flight for one page.
	tenantReadConcurrency = 16
)

// ListTenants pages the global tenant registry (keys.Tenants) in tenant_id
// byte order. The registry and the tenant records live in different Cluster
// slots, so a page is two steps: one script reads the next registry ids after
// the cursor (sweeper/tenants, shared with the sweeper), then each record is
// read by admin/get_tenant in its own slot (concurrently, bounded). A
// registry id without a record (a create that stopped between its two
// scripts) is skipped. Without filters a page examines `limit` ids; with a
// status or search filter at most 4 x limit, so a filtered page may be short,
// even empty, with has_more set. The cursor is the last id examined,
// base64url-encoded: ids added behind it are seen by a later listing, never
// twice.
func (s *Service) ListTenants(ctx context.Context, req *cyclesv1.ListTenantsRequest) (*cyclesv1.ListTenantsResponse, error) {
	limit := pageLimit(req.GetLimit(), DefaultTenantListLimit, MaxTenantListLimit)
	after, err := pagecursor.Decode("cursor", req.GetCursor())
	if err != nil {
		return nil, err
	}
	if after != "" && !auth.ValidTenantID(after) {
		return nil, pagecursor.Invalid("cursor")
	}
	search := strings.ToLower(req.GetSearch())
	status := req.GetStatus()
	filtered := search != "" || status != cyclesv1.TenantStatus_TENANT_STATUS_UNSPECIFIED
	scan := limit
	if filtered {
		scan = tenantFilterScan * limit
	}
	ids, err := sweeper.TenantPage(ctx, s.exec, after, scan)
	if err != nil {
		return nil, err
	}
	tenants := make([]*cyclesv1.Tenant, len(ids)) // nil: no record
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(tenantReadConcurrency)
	for i, id := range ids {
		g.Go(func() error {
			var rec record
			if err := scriptGetTenant.RunInto(gctx, s.exec, &rec, recordKeys{keys.Tenant(id).Record()}, tenantIDArgs{id}); err != nil {
				if ae, ok := apierr.As(err); ok && ae.Code == apierr.TenantNotFound {
					return nil
				}
				return err
			}
			t, err := tenantFromRecord(rec)
			tenants[i] = t
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	resp := &cyclesv1.ListTenantsResponse{}
	last := ""
	for i, t := range tenants {
		if len(resp.Tenants) == limit {
			break
		}
		last = ids[i]
		if t == nil || status != cyclesv1.TenantStatus_TENANT_STATUS_UNSPECIFIED && t.GetStatus() != status ||
			search != "" && !strings.Contains(strings.ToLower(t.GetTenantId()), search) && !strings.Contains(strings.ToLower(t.GetName()), search) {
			continue
		}
		resp.Tenants = append(resp.Tenants, t)
	}
	// More may follow when this call stopped before its last id, or when the
	// registry gave a full window (the next may be empty: then has_more is a
	// conservative true, and the next page is empty and final).
	if last != "" && (last != ids[len(ids)-1] || len(ids) == scan) {
		resp.HasMore = true
		resp.NextCursor = pagecursor.Encode(last)
	}
	return resp, nil
}
