package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/actionkind"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/scope"
)

// Tenant defaults (admin.proto).
const (
	DefaultTenantPolicy  = cyclesv1.CommitOveragePolicy_COMMIT_OVERAGE_POLICY_ALLOW_IF_AVAILABLE
	DefaultTenantTTLms   = 60_000
	DefaultMaxExtensions = 10
)

// CreateTenant registers the tenant id in the global registry, then creates
// the record (two scripts, in that order: a registry entry without a record is
// harmless, a record missing from the registry would hide the tenant from the
// sweeper). An existing tenant is DUPLICATE_RESOURCE.
func (s *Service) CreateTenant(ctx context.Context, req *cyclesv1.CreateTenantRequest) (*cyclesv1.CreateTenantResponse, error) {
	t, err := s.createTenant(ctx, req)
	if err != nil {
		return nil, err
	}
	s.m.tenantsCreated.Add(ctx, 1)
	return &cyclesv1.CreateTenantResponse{Tenant: t}, nil
}

func (s *Service) createTenant(ctx context.Context, req *cyclesv1.CreateTenantRequest) (*cyclesv1.Tenant, error) {
	id := req.GetTenantId()
	policy := req.GetDefaultCommitOveragePolicy()
	if policy == cyclesv1.CommitOveragePolicy_COMMIT_OVERAGE_POLICY_UNSPECIFIED {
		policy = DefaultTenantPolicy
	}
	ttl := int64(DefaultTenantTTLms)
	if req.DefaultReservationTtlMs != nil {
		ttl = req.GetDefaultReservationTtlMs()
	}
	maxExt := int32(DefaultMaxExtensions)
	if req.MaxReservationExtensions != nil {
		maxExt = req.GetMaxReservationExtensions()
	}
	if err := scriptRegisterTenant.RunInto(ctx, s.exec, nil, registryKeys{keys.Tenants}, tenantIDArgs{id}); err != nil {
		return nil, err
	}
	tk := keys.Tenant(id)
	var rec record
	err := scriptCreateTenant.RunInto(ctx, s.exec, &rec, tenantKeys{tk.Record(), tk.Events()},
		createTenantArgs{id, req.GetName(), scope.PolicyKey(policy), ttl, req.GetMaxReservationTtlMs(), int64(maxExt),
			metadataJSON(req.GetMetadata()), s.eventContext(ctx)})
	if err != nil {
		return nil, err
	}
	return tenantFromRecord(rec)
}

// GetTenant reads a tenant; unknown is TENANT_NOT_FOUND.
func (s *Service) GetTenant(ctx context.Context, req *cyclesv1.GetTenantRequest) (*cyclesv1.GetTenantResponse, error) {
	var rec record
	id := req.GetTenantId()
	if err := scriptGetTenant.RunInto(ctx, s.exec, &rec, recordKeys{keys.Tenant(id).Record()}, tenantIDArgs{id}); err != nil {
		return nil, err
	}
	t, err := tenantFromRecord(rec)
	if err != nil {
		return nil, err
	}
	return &cyclesv1.GetTenantResponse{Tenant: t}, nil
}

// tenantPatch is the patch ARGV of admin/update_tenant (absent = unchanged).
type tenantPatch struct {
	Name            *string           `json:"name,omitempty"`
	DefaultPolicy   string            `json:"default_policy,omitempty"`
	DefaultTTLms    string            `json:"default_ttl_ms,omitempty"`
	MaxTTLms        string            `json:"max_ttl_ms,omitempty"`
	MaxExtensions   string            `json:"max_extensions,omitempty"`
	Status          string            `json:"status,omitempty"`
	Metadata        map[string]string `json:"metadata,omitempty"`
	ReplaceMetadata bool              `json:"replace_metadata,omitempty"`
	ObserveMode     string            `json:"observe_mode,omitempty"`
}

// UpdateTenant changes defaults, name, metadata and ACTIVE <-> SUSPENDED
// status. A CLOSED tenant refuses every update with TENANT_CLOSED.
func (s *Service) UpdateTenant(ctx context.Context, req *cyclesv1.UpdateTenantRequest) (*cyclesv1.UpdateTenantResponse, error) {
	p := tenantPatch{
		Name:            req.Name,
		DefaultPolicy:   scope.PolicyKey(req.GetDefaultCommitOveragePolicy()),
		Metadata:        req.GetMetadata(),
		ReplaceMetadata: req.GetReplaceMetadata(),
	}
	if req.DefaultReservationTtlMs != nil {
		p.DefaultTTLms = strconv.FormatInt(req.GetDefaultReservationTtlMs(), 10)
	}
	if req.MaxReservationTtlMs != nil {
		p.MaxTTLms = strconv.FormatInt(req.GetMaxReservationTtlMs(), 10)
	}
	if req.MaxReservationExtensions != nil {
		p.MaxExtensions = strconv.FormatInt(int64(req.GetMaxReservationExtensions()), 10)
	}
	if m := req.GetObserveMode(); m != cyclesv1.ObserveMode_OBSERVE_MODE_UNSPECIFIED {
		p.ObserveMode = actionkind.ObserveModeName(m)
	}
	switch req.GetStatus() {
	case cyclesv1.TenantStatus_TENANT_STATUS_ACTIVE:
		p.Status = "ACTIVE"
	case cyclesv1.TenantStatus_TENANT_STATUS_SUSPENDED:
		p.Status = "SUSPENDED"
	}
	patch, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("encode tenant patch: %w", err)
	}
	id := req.GetTenantId()
	tk := keys.Tenant(id)
	var rec record
	if err := scriptUpdateTenant.RunInto(ctx, s.exec, &rec, tenantKeys{tk.Record(), tk.Events()},
		tenantPatchArgs{id, string(patch), s.eventContext(ctx)}); err != nil {
		return nil, err
	}
	t, err := tenantFromRecord(rec)
	if err != nil {
		return nil, err
	}
	s.m.tenantsUpdated.Add(ctx, 1, metric.WithAttributes(attribute.String("status", rec["status"])))
	return &cyclesv1.UpdateTenantResponse{Tenant: t}, nil
}

// CloseTenant flips the tenant to CLOSED (one script, event tenant.closed),
// then releases its open reservations through the ledger's release path,
// batch after batch until none remain.
//
// Closing a CLOSED tenant returns it unchanged; the release loop still runs,
// so a close interrupted after the flip (crash, timeout, Redis failover) is
// completed by simply calling CloseTenant again. In the normal case the
// second call releases 0.
func (s *Service) CloseTenant(ctx context.Context, req *cyclesv1.CloseTenantRequest) (*cyclesv1.CloseTenantResponse, error) {
	id := req.GetTenantId()
	tk := keys.Tenant(id)
	var out closeReply
	if err := scriptCloseTenant.RunInto(ctx, s.exec, &out, tenantKeys{tk.Record(), tk.Events()}, tenantCtxArgs{id, s.eventContext(ctx)}); err != nil {
		return nil, err
	}
	t, err := tenantFromRecord(out.Tenant)
	if err != nil {
		return nil, err
	}
	if out.ClosedNow {
		s.m.tenantsClosed.Add(ctx, 1)
	}
	released, err := s.releaseOpen(ctx, id)
	if released > 0 {
		s.m.closeReleased.Add(ctx, released)
	}
	if err != nil {
		return nil, fmt.Errorf("tenant %s is CLOSED but releasing its reservations failed after %d (call CloseTenant again to finish): %w", id, released, err)
	}
	return &cyclesv1.CloseTenantResponse{Tenant: t, ReleasedReservations: released}, nil
}

// releaseOpen drives the releaser until it reports nothing more to release.
func (s *Service) releaseOpen(ctx context.Context, tenant string) (int64, error) {
	if s.releaser == nil {
		return 0, nil
	}
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		n, more, err := s.releaser.ReleaseForTenantClose(ctx, tenant, CloseReleaseBatch)
		total += int64(n)
		if err != nil {
			return total, err
		}
		if !more {
			return total, nil
		}
	}
}
