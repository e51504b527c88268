package validate

import (
	"fmt"
	"strings"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/permission"
	"github.com/cyclesgo/cycles-go/internal/scope"
	"github.com/cyclesgo/cycles-go/internal/scopefilter"
	"google.golang.org/protobuf/proto"
)

// Admin request bounds (admin.proto comments).
const (
	adminMaxName          = 256
	adminMaxReason        = 256
	adminMaxExtensions    = 1_000
	adminMaxScopePathLen  = 1024
	adminKeyIDLen         = 16
	adminMaxBudgetListLen = 200
	adminMaxTenantListLen = 100
	adminMaxKeyListLen    = 100
	adminMaxSearchLen     = 128
)

// AdminScopePath shape-checks an operator-written scope path: required,
// bounded, segments "<level>:<value>" with a known level and a legal value.
// Level order and the tenant root are checked (and the path lowercased) by
// scope.Canonical in the admin domain, which knows the tenant.
func AdminScopePath(field, v string) error {
	if v == "" {
		return invalid(field, "is required")
	}
	if len(v) > adminMaxScopePathLen {
		return invalid(field, "must be at most %d bytes", adminMaxScopePathLen)
	}
	for _, seg := range strings.Split(v, "/") {
		level, value, ok := strings.Cut(seg, ":")
		if !ok {
			return invalid(field, "segment %q: want <level>:<value>", seg)
		}
		known := false
		for _, l := range scope.Levels {
			known = known || l == level
		}
		if !known {
			return invalid(field, "segment %q: level must be one of %s", seg, strings.Join(scope.Levels[:], ", "))
		}
		if !scope.ValidValue(value) {
			return invalid(field, "segment %q: value must match [a-zA-Z0-9_.-]{1,128}", seg)
		}
	}
	return nil
}

// adminBudgetRef: tenant_id, scope_path and unit of a request naming one budget.
func adminBudgetRef(r budgetRef) error {
	return first(
		TenantID("tenant_id", r.GetTenantId()),
		AdminScopePath("scope_path", r.GetScopePath()),
		Unit("unit", r.GetUnit()),
	)
}

// budgetRef is an admin request naming one budget by tenant, scope path and
// unit.
type budgetRef interface {
	GetTenantId() string
	GetScopePath() string
	GetUnit() cyclesv1.Unit
}

// adminBudgetTransition validates a status transition of one budget (freeze,
// unfreeze, close): the budget and an optional reason.
func adminBudgetTransition[T interface {
	proto.Message
	budgetRef
	GetReason() string
}](r T) error {
	return first(
		adminBudgetRef(r),
		Text("reason", r.GetReason(), adminMaxReason),
	)
}

// adminTTL: an optional ttl of the tenant defaults, 1,000..86,400,000.
func adminTTL(field string, v *int64, zeroAllowed bool) error {
	if v == nil || (zeroAllowed && *v == 0) {
		return nil
	}
	return Range(field, *v, MinTTLms, MaxTTLms)
}

// tenantDefaults checks the reservation defaults a tenant create or update
// may set; maxTTLZeroOK lets an update remove the TTL cap with 0.
func tenantDefaults(policy cyclesv1.CommitOveragePolicy, defaultTTL, maxTTL *int64, maxTTLZeroOK bool, maxExtensions *int32) error {
	if err := first(
		Policy("default_commit_overage_policy", policy),
		adminTTL("default_reservation_ttl_ms", defaultTTL, false),
		adminTTL("max_reservation_ttl_ms", maxTTL, maxTTLZeroOK),
	); err != nil {
		return err
	}
	if maxExtensions != nil {
		return Range("max_reservation_extensions", int64(*maxExtensions), 0, adminMaxExtensions)
	}
	return nil
}

// Admin request validators (admin.proto).
func init() {
	register(func(r *cyclesv1.CreateTenantRequest) error {
		return first(
			TenantID("tenant_id", r.GetTenantId()),
			Text("name", r.GetName(), adminMaxName),
			tenantDefaults(r.GetDefaultCommitOveragePolicy(), r.DefaultReservationTtlMs, r.MaxReservationTtlMs, false, r.MaxReservationExtensions),
			StringMap("metadata", r.GetMetadata()),
		)
	})
	register(func(r *cyclesv1.GetTenantRequest) error {
		return TenantID("tenant_id", r.GetTenantId())
	})
	register(func(r *cyclesv1.ListTenantsRequest) error {
		if err := declared("status", r.GetStatus(), "must be one of ACTIVE, SUSPENDED, CLOSED"); err != nil {
			return err
		}
		return first(
			Text("search", r.GetSearch(), adminMaxSearchLen),
			Limit("limit", &r.Limit, adminMaxTenantListLen),
			Cursor("cursor", r.GetCursor()),
		)
	})
	register(func(r *cyclesv1.ListApiKeysRequest) error {
		if r.GetTenantId() != "" {
			if err := TenantID("tenant_id", r.GetTenantId()); err != nil {
				return err
			}
		}
		if err := declared("status", r.GetStatus(), "must be one of ACTIVE, REVOKED"); err != nil {
			return err
		}
		return first(
			Text("search", r.GetSearch(), adminMaxSearchLen),
			Limit("limit", &r.Limit, adminMaxKeyListLen),
			Cursor("cursor", r.GetCursor()),
		)
	})
	register(func(r *cyclesv1.UpdateTenantRequest) error {
		if err := TenantID("tenant_id", r.GetTenantId()); err != nil {
			return err
		}
		if r.Name != nil {
			if err := Text("name", r.GetName(), adminMaxName); err != nil {
				return err
			}
		}
		// A max_reservation_ttl_ms of 0 removes the cap.
		if err := tenantDefaults(r.GetDefaultCommitOveragePolicy(), r.DefaultReservationTtlMs, r.MaxReservationTtlMs, true, r.MaxReservationExtensions); err != nil {
			return err
		}
		switch r.GetStatus() {
		case cyclesv1.TenantStatus_TENANT_STATUS_UNSPECIFIED, cyclesv1.TenantStatus_TENANT_STATUS_ACTIVE, cyclesv1.TenantStatus_TENANT_STATUS_SUSPENDED:
		case cyclesv1.TenantStatus_TENANT_STATUS_CLOSED:
			return invalid("status", "use CloseTenant to close a tenant")
		default:
			return invalid("status", "must be ACTIVE or SUSPENDED")
		}
		return first(
			ObserveMode("observe_mode", r.GetObserveMode()),
			StringMap("metadata", r.GetMetadata()),
		)
	})
	register(func(r *cyclesv1.CloseTenantRequest) error {
		return TenantID("tenant_id", r.GetTenantId())
	})
	register(func(r *cyclesv1.CreateApiKeyRequest) error {
		if err := first(
			TenantID("tenant_id", r.GetTenantId()),
			Text("name", r.GetName(), adminMaxName),
		); err != nil {
			return err
		}
		if i, err := permission.Check(r.GetPermissions()); err != nil {
			return invalid(fmt.Sprintf("permissions[%d]", i), "%v", err)
		}
		if _, i, err := scopefilter.Check(r.GetTenantId(), r.GetScopeFilter()); err != nil {
			return invalid(fmt.Sprintf("scope_filter[%d]", i), "%v", err)
		}
		if r.ExpiresAtMs != nil && r.GetExpiresAtMs() <= 0 {
			return invalid("expires_at", "must be a time in the future")
		}
		return first(
			Text("description", r.GetDescription(), 1024),
			StringMap("metadata", r.GetMetadata()),
		)
	})
	register(func(r *cyclesv1.RevokeApiKeyRequest) error {
		return first(
			TenantID("tenant_id", r.GetTenantId()),
			Text("reason", r.GetReason(), 512),
			keyID("key_id", r.GetKeyId()),
		)
	})
	register(func(r *cyclesv1.CreateBudgetRequest) error {
		return first(
			adminBudgetRef(r),
			NonNegative("allocated", r.GetAllocated()),
			NonNegative("overdraft_limit", r.GetOverdraftLimit()),
			Policy("commit_overage_policy", r.GetCommitOveragePolicy()),
			Caps("caps", r.GetCaps()),
			StringMap("metadata", r.GetMetadata()),
		)
	})
	register(func(r *cyclesv1.GetBudgetRequest) error {
		return adminBudgetRef(r)
	})
	register(func(r *cyclesv1.ListBudgetsRequest) error {
		if r.GetTenantId() != "" { // absent: every tenant's budgets
			if err := TenantID("tenant_id", r.GetTenantId()); err != nil {
				return err
			}
		}
		if r.GetScopePrefix() != "" {
			if r.GetTenantId() == "" && scope.TenantOf(r.GetScopePrefix()) == "" {
				// The prefix names the tenant when tenant_id does not
				// (AdminService.ListBudgets reads it from there).
				return invalid("scope_prefix", "needs tenant_id, or must start with tenant:<id>")
			}
			if err := AdminScopePath("scope_prefix", r.GetScopePrefix()); err != nil {
				return err
			}
		}
		return first(
			OptionalUnit("unit", r.GetUnit()),
			Limit("limit", &r.Limit, adminMaxBudgetListLen),
			Cursor("cursor", r.GetCursor()),
		)
	})
	register(func(r *cyclesv1.FundBudgetRequest) error {
		if err := adminBudgetRef(r); err != nil {
			return err
		}
		op := r.GetOperation()
		if _, known := cyclesv1.FundingOperation_name[int32(op)]; !known || op == cyclesv1.FundingOperation_FUNDING_OPERATION_UNSPECIFIED {
			return invalid("operation", "must be one of CREDIT, DEBIT, RESET, RESET_SPENT, REPAY_DEBT")
		}
		if err := NonNegative("amount", r.GetAmount()); err != nil {
			return err
		}
		if r.Spent != nil {
			if op != cyclesv1.FundingOperation_FUNDING_OPERATION_RESET_SPENT {
				return invalid("spent", "only RESET_SPENT takes spent")
			}
			if err := NonNegative("spent", r.GetSpent()); err != nil {
				return err
			}
		}
		return first(
			Text("reason", r.GetReason(), adminMaxReason),
			IdempotencyKey("idempotency_key", r.GetIdempotencyKey()),
		)
	})
	register(func(r *cyclesv1.UpdateBudgetRequest) error {
		if err := adminBudgetRef(r); err != nil {
			return err
		}
		if r.OverdraftLimit != nil {
			if err := NonNegative("overdraft_limit", r.GetOverdraftLimit()); err != nil {
				return err
			}
		}
		if err := Policy("commit_overage_policy", r.GetCommitOveragePolicy()); err != nil {
			return err
		}
		if r.Caps != nil && r.GetClearCaps() {
			return invalid("clear_caps", "cannot be combined with caps")
		}
		return first(
			Caps("caps", r.GetCaps()),
			StringMap("metadata", r.GetMetadata()),
		)
	})
	register(adminBudgetTransition[*cyclesv1.FreezeBudgetRequest])
	register(adminBudgetTransition[*cyclesv1.UnfreezeBudgetRequest])
	register(adminBudgetTransition[*cyclesv1.CloseBudgetRequest])
}
