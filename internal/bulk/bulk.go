// Package bulk applies one operator action to every tenant or budget a
// filter selects (OperatorService; POST /v1/admin/tenants/bulk-action and
// /v1/admin/budgets/bulk-action). Every row goes through the admin domain's
// own RPC code (internal/admin), so it is validated, applied and audited
// exactly as the single-row call: its script appends the row's audit entry
// (internal/audit.Row), a refused row gets a refusal entry. A request is
// replayed from its idempotency record for 15 minutes; an expected_count that
// differs from the matches refuses it before any write; at most MaxRows rows.
package bulk

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/big"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/admin"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/audit"
	"github.com/cyclesgo/cycles-go/internal/idempotency"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/script"
)

// Bounds.
const (
	// MaxRows is the most rows one bulk action may match.
	MaxRows = 500
	// ReplayWindow is how long a bulk action's answer is replayed.
	ReplayWindow = 15 * time.Minute
	// listPage is the page size of the listings that find the rows.
	listPage = 100
	// maxPages bounds a listing walk (registry size / examined per page).
	maxPages = 10_000
)

// Skip reason of rows already in the target state.
const alreadyInTarget = "ALREADY_IN_TARGET_STATE"

var scriptRemember = script.Bind[rememberKeys, rememberArgs]("bulk/remember")

type rememberKeys struct {
	Record string `lua:"record"`
}

type rememberArgs struct {
	Mode        string `lua:"mode"` // get | put
	PayloadHash string `lua:"payload_hash"`
	Answer      string `lua:"answer"`      // put only
	LifetimeMs  int64  `lua:"lifetime_ms"` // put only
}

// Service runs bulk actions.
type Service struct {
	exec  *script.Executor
	adm   *admin.Service
	audit *audit.Service
}

// New builds the service on the admin domain (adm) and the audit trail (aud).
func New(exec *script.Executor, adm *admin.Service, aud *audit.Service) *Service {
	return &Service{exec: exec, adm: adm, audit: aud}
}

// recall returns the stored answer of key into out (found false when none).
func (s *Service) recall(ctx context.Context, key, hash string, out proto.Message) (bool, error) {
	var rec struct {
		Resp string `json:"resp"`
	}
	if err := scriptRemember.RunInto(ctx, s.exec, &rec, rememberKeys{key}, rememberArgs{Mode: "get", PayloadHash: hash}); err != nil {
		return false, err
	}
	if rec.Resp == "" {
		return false, nil
	}
	if err := protojson.Unmarshal([]byte(rec.Resp), out); err != nil {
		return false, fmt.Errorf("bulk record %s: %w", key, err)
	}
	return true, nil
}

// remember stores resp under key (or, when a twin stored first, returns its
// answer in resp).
func (s *Service) remember(ctx context.Context, key, hash string, resp proto.Message) error {
	b, err := protojson.Marshal(resp)
	if err != nil {
		return fmt.Errorf("encode bulk answer: %w", err)
	}
	var rec struct {
		Resp string `json:"resp"`
	}
	if err := scriptRemember.RunInto(ctx, s.exec, &rec, rememberKeys{key},
		rememberArgs{"put", hash, string(b), ReplayWindow.Milliseconds()}); err != nil {
		return err
	}
	if rec.Resp != string(b) {
		return protojson.Unmarshal([]byte(rec.Resp), resp)
	}
	return nil
}

// failedRow is a refused row in the bulk vocabulary (state conflicts are
// INVALID_TRANSITION, not-found codes NOT_FOUND).
func failedRow(id string, err error) *cyclesv1.BulkRowOutcome {
	code, msg := apierr.InternalError, "internal error"
	if ae, ok := apierr.As(err); ok {
		code, msg = ae.Code, ae.Message
	}
	switch code {
	case apierr.TenantClosed, apierr.BudgetClosed, apierr.BudgetFrozen, apierr.InvalidState, apierr.UnitMismatch:
		code = "INVALID_TRANSITION"
	case apierr.TenantNotFound, apierr.BudgetNotFound:
		code = apierr.NotFound
	}
	return &cyclesv1.BulkRowOutcome{Id: id, ErrorCode: string(code), Message: msg}
}

// fileRow files an attempted row: under failed with err's outcome, or under
// succeeded when err is nil.
func fileRow(failed, succeeded *[]*cyclesv1.BulkRowOutcome, id string, err error) {
	if err != nil {
		*failed = append(*failed, failedRow(id, err))
		return
	}
	*succeeded = append(*succeeded, &cyclesv1.BulkRowOutcome{Id: id})
}

// answer records resp as the request's answer for replays and returns it;
// when it cannot be recorded the caller gets the error, not the answer.
func answer[R proto.Message](ctx context.Context, s *Service, rk, hash string, resp R) (R, error) {
	if err := s.remember(ctx, rk, hash, resp); err != nil {
		var zero R
		return zero, err
	}
	return resp, nil
}

func countCheck(expected *int64, matched int) error {
	if matched > MaxRows {
		return apierr.Invalid("filter", "matches more than %d rows; narrow it", MaxRows)
	}
	if expected != nil && *expected != int64(matched) {
		return apierr.New(apierr.CountMismatch, "the filter matches %d rows, not the expected %d; nothing was changed", matched, *expected).
			With("total_matched", fmt.Sprint(matched))
	}
	return nil
}

// BulkActionTenants runs a tenant bulk action (OperatorService, served by
// internal/api/operatorapi as is).
func (s *Service) BulkActionTenants(ctx context.Context, req *cyclesv1.BulkActionTenantsRequest) (*cyclesv1.BulkActionTenantsResponse, error) {
	hash, err := idempotency.PayloadHash(req)
	if err != nil {
		return nil, err
	}
	rk := keys.BulkTenants(req.GetIdempotencyKey())
	resp := &cyclesv1.BulkActionTenantsResponse{}
	if found, err := s.recall(ctx, rk, hash, resp); err != nil || found {
		return resp, err
	}
	lr := &cyclesv1.ListTenantsRequest{Status: req.GetFilter().GetStatus(), Search: req.GetFilter().GetSearch(), Limit: listPage}
	matched, err := collect(ctx, "tenants", func(ctx context.Context, cursor string) (*cyclesv1.ListTenantsResponse, error) {
		lr.Cursor = cursor
		return s.adm.ListTenants(ctx, lr)
	}, (*cyclesv1.ListTenantsResponse).GetTenants, nil)
	if err != nil {
		return nil, err
	}
	if err := countCheck(req.ExpectedCount, len(matched)); err != nil {
		return nil, err
	}
	resp = &cyclesv1.BulkActionTenantsResponse{Action: req.GetAction(), TotalMatched: int64(len(matched)), IdempotencyKey: req.GetIdempotencyKey()}
	target := map[cyclesv1.TenantBulkAction]cyclesv1.TenantStatus{
		cyclesv1.TenantBulkAction_TENANT_BULK_ACTION_SUSPEND:    cyclesv1.TenantStatus_TENANT_STATUS_SUSPENDED,
		cyclesv1.TenantBulkAction_TENANT_BULK_ACTION_REACTIVATE: cyclesv1.TenantStatus_TENANT_STATUS_ACTIVE,
		cyclesv1.TenantBulkAction_TENANT_BULK_ACTION_CLOSE:      cyclesv1.TenantStatus_TENANT_STATUS_CLOSED,
	}[req.GetAction()]
	rows := correlated(ctx, "tenant", req.GetAction().String(), "TENANT_BULK_ACTION_")
	for _, t := range matched {
		id := t.GetTenantId()
		if t.GetStatus() == target {
			resp.Skipped = append(resp.Skipped, &cyclesv1.BulkRowOutcome{Id: id, Reason: alreadyInTarget})
			continue
		}
		var err error
		if target == cyclesv1.TenantStatus_TENANT_STATUS_CLOSED {
			rctx := audit.Row(rows, "closeTenant", audit.ResourceTenant, id, id, req.GetIdempotencyKey())
			if _, err = s.adm.CloseTenant(rctx, &cyclesv1.CloseTenantRequest{TenantId: id}); err != nil {
				s.audit.Refused(rctx, err)
			}
		} else {
			rctx := audit.Row(rows, "updateTenant", audit.ResourceTenant, id, id, req.GetIdempotencyKey())
			if _, err = s.adm.UpdateTenant(rctx, &cyclesv1.UpdateTenantRequest{TenantId: id, Status: target}); err != nil {
				s.audit.Refused(rctx, err)
			}
		}
		fileRow(&resp.Failed, &resp.Succeeded, id, err)
	}
	return answer(ctx, s, rk, hash, resp)
}

// BulkActionBudgets runs a budget bulk action on one tenant's budgets.
func (s *Service) BulkActionBudgets(ctx context.Context, req *cyclesv1.BulkActionBudgetsRequest) (*cyclesv1.BulkActionBudgetsResponse, error) {
	f := req.GetFilter()
	tenant := f.GetTenantId()
	uMin, uMax, err := utilizationBounds(f)
	if err != nil {
		return nil, err
	}
	hash, err := idempotency.PayloadHash(req)
	if err != nil {
		return nil, err
	}
	rk := keys.Tenant(tenant).Idempotency("bulk", req.GetIdempotencyKey())
	resp := &cyclesv1.BulkActionBudgetsResponse{}
	if found, err := s.recall(ctx, rk, hash, resp); err != nil || found {
		return resp, err
	}
	lr := &cyclesv1.ListBudgetsRequest{TenantId: tenant, ScopePrefix: f.GetScopePrefix(), Unit: f.GetUnit(), Limit: listPage}
	search := strings.ToLower(f.GetSearch())
	matched, err := collect(ctx, "budgets", func(ctx context.Context, cursor string) (*cyclesv1.ListBudgetsResponse, error) {
		lr.Cursor = cursor
		return s.adm.ListBudgets(ctx, lr)
	}, (*cyclesv1.ListBudgetsResponse).GetBudgets, func(b *cyclesv1.Budget) bool {
		return budgetMatches(b, f, search, uMin, uMax)
	})
	if err != nil {
		return nil, err
	}
	if err := countCheck(req.ExpectedCount, len(matched)); err != nil {
		return nil, err
	}
	resp = &cyclesv1.BulkActionBudgetsResponse{Action: req.GetAction(), TotalMatched: int64(len(matched)), IdempotencyKey: req.GetIdempotencyKey()}
	rows := correlated(ctx, "budget", req.GetAction().String(), "FUNDING_OPERATION_")
	for _, b := range matched {
		id := b.GetScopePath() + "|" + strings.TrimPrefix(b.GetUnit().String(), "UNIT_")
		switch {
		case b.GetUnit() != req.GetAmount().GetUnit():
			resp.Failed = append(resp.Failed, &cyclesv1.BulkRowOutcome{Id: id, ErrorCode: "INVALID_TRANSITION",
				Message: "the amount's unit is not the budget's"})
			continue
		case req.GetAction() == cyclesv1.FundingOperation_FUNDING_OPERATION_REPAY_DEBT && b.GetDebt() == 0:
			resp.Skipped = append(resp.Skipped, &cyclesv1.BulkRowOutcome{Id: id, Reason: alreadyInTarget})
			continue
		}
		// Each row's own idempotency key: a replay of the bulk action after
		// its record expired cannot apply a row twice within the funding
		// record's lifetime.
		sum := sha256.Sum256([]byte(id))
		fr := &cyclesv1.FundBudgetRequest{TenantId: tenant, ScopePath: b.GetScopePath(), Unit: b.GetUnit(), Operation: req.GetAction(),
			Amount: req.GetAmount().GetAmount(), Spent: req.Spent, Reason: req.GetReason(),
			IdempotencyKey: "bulk." + req.GetIdempotencyKey() + "." + hex.EncodeToString(sum[:8])}
		rctx := audit.Row(rows, "fundBudget", audit.ResourceBudget, tenant, id, req.GetIdempotencyKey())
		_, err := s.adm.FundBudget(rctx, fr)
		if err != nil {
			s.audit.Refused(rctx, err)
		}
		fileRow(&resp.Failed, &resp.Succeeded, id, err)
	}
	return answer(ctx, s, rk, hash, resp)
}

// page is one page of an admin listing: its rows are read by the caller's
// accessor, the cursor and has-more flag are common to every listing.
type page interface {
	GetHasMore() bool
	GetNextCursor() string
}

// collect walks a listing page by page from the first cursor, keeping the
// rows keep accepts (all rows when keep is nil). It stops once more than
// MaxRows rows are kept (countCheck and the caller refuse that) or the
// listing ends, and refuses a filter that would examine more than maxPages
// pages, so a stranger's filter cannot make one request walk without bound.
// what names the rows in that refusal.
func collect[P page, T any](ctx context.Context, what string, list func(context.Context, string) (P, error),
	rows func(P) []T, keep func(T) bool,
) ([]T, error) {
	var matched []T
	cursor := ""
	for n := 0; ; n++ {
		if n == maxPages {
			return nil, apierr.Invalid("filter", "examines too many %s; narrow it", what)
		}
		l, err := list(ctx, cursor)
		if err != nil {
			return nil, err
		}
		for _, r := range rows(l) {
			if keep == nil || keep(r) {
				matched = append(matched, r)
			}
		}
		if len(matched) > MaxRows || !l.GetHasMore() {
			return matched, nil
		}
		cursor = l.GetNextCursor()
	}
}

// utilizationBounds parses the filter's decimal bounds (exact rationals).
func utilizationBounds(f *cyclesv1.BudgetBulkFilter) (lo, hi *big.Rat, err error) {
	parse := func(field, s string) (*big.Rat, error) {
		if s == "" {
			return nil, nil
		}
		r, ok := new(big.Rat).SetString(s)
		if !ok || r.Sign() < 0 || r.Cmp(big.NewRat(1, 1)) > 0 {
			return nil, apierr.Invalid(field, "must be a decimal number from 0 to 1")
		}
		return r, nil
	}
	if lo, err = parse("utilization_min", f.GetUtilizationMin()); err != nil {
		return nil, nil, err
	}
	if hi, err = parse("utilization_max", f.GetUtilizationMax()); err != nil {
		return nil, nil, err
	}
	if lo != nil && hi != nil && lo.Cmp(hi) > 0 {
		return nil, nil, apierr.Invalid("utilization_min", "is greater than utilization_max")
	}
	return lo, hi, nil
}

// budgetMatches applies the filters the budget listing does not.
func budgetMatches(b *cyclesv1.Budget, f *cyclesv1.BudgetBulkFilter, search string, uMin, uMax *big.Rat) bool {
	if f.GetStatus() != cyclesv1.BudgetStatus_BUDGET_STATUS_UNSPECIFIED && b.GetStatus() != f.GetStatus() {
		return false
	}
	if f.OverLimit != nil && b.GetIsOverLimit() != f.GetOverLimit() {
		return false
	}
	if f.HasDebt != nil && (b.GetDebt() > 0) != f.GetHasDebt() {
		return false
	}
	if search != "" && !strings.Contains(strings.ToLower(b.GetScopePath()), search) {
		return false
	}
	if uMin != nil || uMax != nil {
		if b.GetAllocated() <= 0 {
			return false // no utilization without an allocation
		}
		u := new(big.Rat).SetFrac(big.NewInt(b.GetSpent()), big.NewInt(b.GetAllocated()))
		if uMin != nil && u.Cmp(uMin) < 0 || uMax != nil && u.Cmp(uMax) > 0 {
			return false
		}
	}
	return true
}
