package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	pagecursor "github.com/cyclesgo/cycles-go/internal/cursor"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/scope"
)

// List bounds.
const (
	DefaultListLimit = 50
	MaxListLimit     = 200
	// ListScanBound is the most budget-index entries one ListBudgets call
	// examines, whatever the filters: a unit filter over a huge index costs
	// several cheap calls, never one long script.
	ListScanBound = 1000
)

// budgetRef names one budget of a request: canonical scope and unit key.
type budgetRef struct {
	tenant string
	scope  string
	unit   string
	keys   keys.Tenant
}

// resolveBudget canonicalizes (tenant, scope_path, unit) of a request.
func resolveBudget(tenant, path string, unit cyclesv1.Unit) (budgetRef, error) {
	sp, err := scope.Canonical(tenant, path)
	if err != nil {
		return budgetRef{}, apierr.Invalid("scope_path", "%s", err.Error())
	}
	u := scope.UnitKey(unit)
	if u == "" {
		return budgetRef{}, apierr.Invalid("unit", "must be one of %s", strings.Join(scope.AllUnits(), ", "))
	}
	return budgetRef{tenant: tenant, scope: sp, unit: u, keys: keys.Tenant(tenant)}, nil
}

func (r budgetRef) key() string { return r.keys.Budget(r.scope, r.unit) }

// CreateBudget creates the ledger of (scope, unit) with remaining = allocated.
// The tenant must exist (TENANT_NOT_FOUND) and be ACTIVE (TENANT_CLOSED,
// TENANT_SUSPENDED); a duplicate is DUPLICATE_RESOURCE.
func (s *Service) CreateBudget(ctx context.Context, req *cyclesv1.CreateBudgetRequest) (*cyclesv1.CreateBudgetResponse, error) {
	if err := ownTenant(ctx, &req.TenantId); err != nil {
		return nil, err
	}
	b, err := s.createBudget(ctx, req)
	if err != nil {
		return nil, err
	}
	s.m.budgetsCreated.Add(ctx, 1, metric.WithAttributes(attribute.String("unit", scope.UnitKey(b.GetUnit()))))
	return &cyclesv1.CreateBudgetResponse{Budget: b}, nil
}

func (s *Service) createBudget(ctx context.Context, req *cyclesv1.CreateBudgetRequest) (*cyclesv1.Budget, error) {
	ref, err := resolveBudget(req.GetTenantId(), req.GetScopePath(), req.GetUnit())
	if err != nil {
		return nil, err
	}
	caps := ""
	if req.Caps != nil {
		if caps, err = EncodeCaps(req.GetCaps()); err != nil {
			return nil, fmt.Errorf("encode caps: %w", err)
		}
	}
	var rec record
	err = scriptCreateBudget.RunInto(ctx, s.exec, &rec,
		createBudgetKeys{ref.keys.Record(), ref.key(), ref.keys.Budgets(), ref.keys.Events()},
		createBudgetArgs{ref.tenant, ref.scope, ref.unit, req.GetAllocated(), req.GetOverdraftLimit(),
			scope.PolicyKey(req.GetCommitOveragePolicy()), caps, metadataJSON(req.GetMetadata()),
			s.eventContext(ctx)})
	if err != nil {
		return nil, err
	}
	return budgetFromRecord(ref.tenant, rec.withIdentity(ref.scope, ref.unit))
}

// GetBudget reads one budget; unknown is BUDGET_NOT_FOUND.
func (s *Service) GetBudget(ctx context.Context, req *cyclesv1.GetBudgetRequest) (*cyclesv1.GetBudgetResponse, error) {
	if err := ownTenant(ctx, &req.TenantId); err != nil {
		return nil, err
	}
	b, err := s.getBudget(ctx, req)
	if err != nil {
		return nil, err
	}
	return &cyclesv1.GetBudgetResponse{Budget: b}, nil
}

func (s *Service) getBudget(ctx context.Context, req *cyclesv1.GetBudgetRequest) (*cyclesv1.Budget, error) {
	ref, err := resolveBudget(req.GetTenantId(), req.GetScopePath(), req.GetUnit())
	if err != nil {
		return nil, err
	}
	var rec record
	if err := scriptGetBudget.RunInto(ctx, s.exec, &rec, budgetKeys{ref.key()}, budgetIDArgs{ref.scope, ref.unit}); err != nil {
		return nil, err
	}
	return budgetFromRecord(ref.tenant, rec.withIdentity(ref.scope, ref.unit))
}

// ListBudgets pages a tenant's budgets in index order ("<scope_path>|<UNIT>",
// byte order), optionally only those at or below scope_prefix (exact segment
// boundary) and in one unit. The cursor is the last index member consumed,
// base64url-encoded; each call examines at most ListScanBound index entries,
// so has_more can be true with a short (even empty) page — follow next_cursor.
func (s *Service) ListBudgets(ctx context.Context, req *cyclesv1.ListBudgetsRequest) (*cyclesv1.ListBudgetsResponse, error) {
	// The tenant listed: tenant_id, else the one scope_prefix names, else
	// (ownTenant) a tenant key's own; the admin key without either lists
	// every tenant's budgets.
	if req.TenantId == "" {
		req.TenantId = scope.TenantOf(req.GetScopePrefix())
	}
	if err := ownTenant(ctx, &req.TenantId); err != nil {
		return nil, err
	}
	return s.listBudgets(ctx, req)
}

func (s *Service) listBudgets(ctx context.Context, req *cyclesv1.ListBudgetsRequest) (*cyclesv1.ListBudgetsResponse, error) {
	tenant := req.GetTenantId()
	if tenant == "" {
		return s.listAllBudgets(ctx, req)
	}
	prefix := ""
	if req.GetScopePrefix() != "" {
		p, err := scope.Canonical(tenant, req.GetScopePrefix())
		if err != nil {
			return nil, apierr.Invalid("scope_prefix", "%s", err.Error())
		}
		prefix = p
	}
	unit := ""
	if req.GetUnit() != cyclesv1.Unit_UNIT_UNSPECIFIED {
		if unit = scope.UnitKey(req.GetUnit()); unit == "" {
			return nil, apierr.Invalid("unit", "unknown unit")
		}
	}
	limit := pageLimit(req.GetLimit(), DefaultListLimit, MaxListLimit)
	after, err := pagecursor.Decode("cursor", req.GetCursor())
	if err != nil {
		return nil, err
	}
	root := "tenant:" + tenant
	if after != "" && (!strings.Contains(after, "|") || !(strings.HasPrefix(after, root+"/") || strings.HasPrefix(after, root+"|"))) {
		return nil, pagecursor.Invalid("cursor")
	}
	page, err := s.budgetPage(ctx, tenant, prefix, unit, after, limit)
	if err != nil {
		return nil, err
	}
	return &cyclesv1.ListBudgetsResponse{HasMore: page.more, Budgets: page.items, NextCursor: page.next(req.GetCursor())}, nil
}

// scanPage is one call of a listing script that examines a bounded run of
// its index (admin/list_budgets, admin/list_api_keys): the items kept, the
// last index member examined, and whether more may follow.
type scanPage[T any] struct {
	items []T
	last  string
	more  bool
}

// next is the cursor of the page after p, for a call that started at cur.
func (p *scanPage[T]) next(cur string) string {
	switch {
	case !p.more:
		return ""
	case p.last != "":
		return pagecursor.Encode(p.last)
	default: // nothing consumed but more may remain: resume where this call started
		return cur
	}
}

// budgetPage runs one list_budgets call on tenant's index after the member
// after (exclusive; "" = from the start).
func (s *Service) budgetPage(ctx context.Context, tenant, prefix, unit, after string, limit int) (*scanPage[*cyclesv1.Budget], error) {
	ranges, err := listRanges(prefix, after)
	if err != nil {
		return nil, err
	}
	tk := keys.Tenant(tenant)
	args := listBudgetsArgs{Unit: unit, PageSize: limit, Scan: ListScanBound, Ranges: make([]string, 0, 2*len(ranges))}
	for _, r := range ranges {
		args.Ranges = append(args.Ranges, r[0], r[1])
	}
	var out budgetsPage
	if err := scriptListBudgets.RunInto(ctx, s.exec, &out, listBudgetsKeys{tk.Prefix(), tk.Budgets()}, args); err != nil {
		return nil, err
	}
	page := &scanPage[*cyclesv1.Budget]{last: out.Last, more: out.More}
	for _, it := range out.Items {
		sp, u, _ := strings.Cut(it.M, "|")
		b, err := budgetFromRecord(tenant, it.B.withIdentity(sp, u))
		if err != nil {
			return nil, err
		}
		page.items = append(page.items, b)
	}
	return page, nil
}

// listRanges turns a scope prefix and a cursor (the last member consumed)
// into ZRANGEBYLEX (min, max) pairs, in the order they are walked. Members at
// or below prefix P are exactly "P/..." (descendants) and "P|UNIT" (P itself);
// since '/' < '|' in byte order the descendants come first. "(P0" and "(P}"
// are exclusive upper bounds: '0' and '}' follow '/' and '|'.
func listRanges(prefix, after string) ([][2]string, error) {
	if prefix == "" {
		min := "-"
		if after != "" {
			min = "(" + after
		}
		return [][2]string{{min, "+"}}, nil
	}
	below := [2]string{"[" + prefix + "/", "(" + prefix + "0"}
	self := [2]string{"[" + prefix + "|", "(" + prefix + "}"}
	switch {
	case after == "":
		return [][2]string{below, self}, nil
	case strings.HasPrefix(after, prefix+"/"):
		return [][2]string{{"(" + after, below[1]}, self}, nil
	case strings.HasPrefix(after, prefix+"|"):
		return [][2]string{{"(" + after, self[1]}}, nil
	default:
		return nil, apierr.Invalid("cursor", "does not belong to scope_prefix %s", prefix)
	}
}

// budgetPatch is the patch ARGV of admin/update_budget (absent = unchanged).
type budgetPatch struct {
	OverdraftLimit      string            `json:"overdraft_limit,omitempty"`
	CommitOveragePolicy string            `json:"commit_overage_policy,omitempty"`
	Caps                string            `json:"caps,omitempty"`
	ClearCaps           bool              `json:"clear_caps,omitempty"`
	Metadata            map[string]string `json:"metadata,omitempty"`
	ReplaceMetadata     bool              `json:"replace_metadata,omitempty"`
}

// UpdateBudget changes overdraft_limit, commit_overage_policy, caps and
// metadata (allowed while FROZEN, BUDGET_CLOSED once closed) and recomputes
// is_over_limit = debt > overdraft_limit.
func (s *Service) UpdateBudget(ctx context.Context, req *cyclesv1.UpdateBudgetRequest) (*cyclesv1.UpdateBudgetResponse, error) {
	b, err := s.updateBudget(ctx, req)
	if err != nil {
		return nil, err
	}
	s.m.budgetsUpdated.Add(ctx, 1)
	return &cyclesv1.UpdateBudgetResponse{Budget: b}, nil
}

func (s *Service) updateBudget(ctx context.Context, req *cyclesv1.UpdateBudgetRequest) (*cyclesv1.Budget, error) {
	ref, err := resolveBudget(req.GetTenantId(), req.GetScopePath(), req.GetUnit())
	if err != nil {
		return nil, err
	}
	if req.Caps != nil && req.GetClearCaps() {
		return nil, apierr.Invalid("clear_caps", "cannot be combined with caps")
	}
	p := budgetPatch{
		CommitOveragePolicy: scope.PolicyKey(req.GetCommitOveragePolicy()),
		ClearCaps:           req.GetClearCaps(),
		Metadata:            req.GetMetadata(),
		ReplaceMetadata:     req.GetReplaceMetadata(),
	}
	if req.OverdraftLimit != nil {
		p.OverdraftLimit = strconv.FormatInt(req.GetOverdraftLimit(), 10)
	}
	if req.Caps != nil {
		if p.Caps, err = EncodeCaps(req.GetCaps()); err != nil {
			return nil, fmt.Errorf("encode caps: %w", err)
		}
	}
	patch, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("encode budget patch: %w", err)
	}
	var rec record
	err = scriptUpdateBudget.RunInto(ctx, s.exec, &rec, budgetChangeKeys{ref.keys.Record(), ref.key(), ref.keys.Events()},
		budgetPatchArgs{ref.scope, ref.unit, string(patch), s.eventContext(ctx)})
	if err != nil {
		return nil, err
	}
	return budgetFromRecord(ref.tenant, rec.withIdentity(ref.scope, ref.unit))
}

// FreezeBudget: ACTIVE -> FROZEN (BUDGET_FROZEN when already frozen,
// BUDGET_CLOSED when closed).
func (s *Service) FreezeBudget(ctx context.Context, req *cyclesv1.FreezeBudgetRequest) (*cyclesv1.FreezeBudgetResponse, error) {
	b, err := s.setStatus(ctx, "FROZEN", req.GetTenantId(), req.GetScopePath(), req.GetUnit(), req.GetReason())
	if err != nil {
		return nil, err
	}
	return &cyclesv1.FreezeBudgetResponse{Budget: b}, nil
}

// UnfreezeBudget: FROZEN -> ACTIVE (INVALID_STATE otherwise).
func (s *Service) UnfreezeBudget(ctx context.Context, req *cyclesv1.UnfreezeBudgetRequest) (*cyclesv1.UnfreezeBudgetResponse, error) {
	b, err := s.setStatus(ctx, "ACTIVE", req.GetTenantId(), req.GetScopePath(), req.GetUnit(), req.GetReason())
	if err != nil {
		return nil, err
	}
	return &cyclesv1.UnfreezeBudgetResponse{Budget: b}, nil
}

// CloseBudget: ACTIVE|FROZEN -> CLOSED, terminal (BUDGET_CLOSED when already closed).
func (s *Service) CloseBudget(ctx context.Context, req *cyclesv1.CloseBudgetRequest) (*cyclesv1.CloseBudgetResponse, error) {
	b, err := s.setStatus(ctx, "CLOSED", req.GetTenantId(), req.GetScopePath(), req.GetUnit(), req.GetReason())
	if err != nil {
		return nil, err
	}
	return &cyclesv1.CloseBudgetResponse{Budget: b}, nil
}

// setStatus moves a budget to target (FROZEN, ACTIVE or CLOSED) through the
// status machine of the set_budget_status script.
func (s *Service) setStatus(ctx context.Context, target, tenant, path string, unit cyclesv1.Unit, reason string) (*cyclesv1.Budget, error) {
	ref, err := resolveBudget(tenant, path, unit)
	if err != nil {
		return nil, err
	}
	var rec record
	err = scriptSetBudgetStatus.RunInto(ctx, s.exec, &rec, budgetChangeKeys{ref.keys.Record(), ref.key(), ref.keys.Events()},
		budgetStatusArgs{ref.scope, ref.unit, reason, s.eventContext(ctx), target})
	if err != nil {
		return nil, err
	}
	b, err := budgetFromRecord(ref.tenant, rec.withIdentity(ref.scope, ref.unit))
	if err != nil {
		return nil, err
	}
	s.m.budgetStatus.Add(ctx, 1, metric.WithAttributes(attribute.String("status", target)))
	return b, nil
}
