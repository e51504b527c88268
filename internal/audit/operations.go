package audit

import (
	"net/http"
	"strings"
	"sync"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/actionkind"
	"github.com/cyclesgo/cycles-go/internal/contract"
	"github.com/cyclesgo/cycles-go/internal/reservationid"
)

// Resource types of audit entries (the spec's standard values, plus the
// ledger's own).
const (
	ResourceTenant      = "tenant"
	ResourceBudget      = "budget"
	ResourceAPIKey      = "api_key"
	ResourceConfig      = "config"
	ResourceReservation = "reservation"
	// ResourcePolicy is a scope policy (resource id: the policy id).
	ResourcePolicy = "policy"
	// ResourceBulk is a bulk action's own entry (resource id "bulk-action").
	ResourceBulk = "bulk_action"
	// ResourceQuotaCounter is one v0.1.26 action-quota counter (resource id:
	// its key fields "<scope>|<action_kind>[:<risk class>]|<window>|<window_key>").
	ResourceQuotaCounter = "action_quota_counter"
)

// operation is how one audited RPC is recorded.
type operation struct {
	// name is the entry's operation: the spec's operationId where the spec
	// has the operation, else the RPC name in the same lowerCamel style.
	name     string
	resource string
	// status is the HTTP status of a success (the HTTP wire answers it).
	status int
	// script: the RPC's mutating script appends the success entry itself
	// (lib/audit.lua), in the same run as the change. Otherwise the success
	// entry is appended after the call returns (audit/append): operations
	// whose work is not one tenant script (sweeper controls and sweeps).
	script bool
}

// onBehalf are the tenant methods the admin key may call on a tenant's
// behalf (their access option names admin_on_behalf_of): of those, only the
// admin's calls are audited; a tenant's own are the ledger's events.
var onBehalf = sync.OnceValue(func() map[string]bool {
	out := map[string]bool{}
	for full, md := range contract.Methods() {
		if a, ok := proto.GetExtension(md.Options(), cyclesv1.E_Access).(*cyclesv1.Access); ok && a.GetAdminOnBehalfOf() != "" {
			out[full] = true
		}
	}
	return out
})

// operations are the audited RPCs: every mutation of the admin plane, the
// ops plane, and the runtime release the admin key makes on a tenant's behalf.
// TestEveryMutationIsAudited keeps the list complete.
var operations = map[string]operation{
	cyclesv1.AdminService_CreateTenant_FullMethodName:   {"createTenant", ResourceTenant, http.StatusCreated, true},
	cyclesv1.AdminService_UpdateTenant_FullMethodName:   {"updateTenant", ResourceTenant, http.StatusOK, true},
	cyclesv1.AdminService_CloseTenant_FullMethodName:    {"closeTenant", ResourceTenant, http.StatusOK, true},
	cyclesv1.AdminService_CreateApiKey_FullMethodName:   {"createApiKey", ResourceAPIKey, http.StatusCreated, true},
	cyclesv1.AdminService_RevokeApiKey_FullMethodName:   {"revokeApiKey", ResourceAPIKey, http.StatusOK, true},
	cyclesv1.AdminService_UpdateApiKey_FullMethodName:   {"updateApiKey", ResourceAPIKey, http.StatusOK, true},
	cyclesv1.AdminService_CreateBudget_FullMethodName:   {"createBudget", ResourceBudget, http.StatusCreated, true},
	cyclesv1.AdminService_FundBudget_FullMethodName:     {"fundBudget", ResourceBudget, http.StatusOK, true},
	cyclesv1.AdminService_UpdateBudget_FullMethodName:   {"updateBudget", ResourceBudget, http.StatusOK, true},
	cyclesv1.AdminService_FreezeBudget_FullMethodName:   {"freezeBudget", ResourceBudget, http.StatusOK, true},
	cyclesv1.AdminService_UnfreezeBudget_FullMethodName: {"unfreezeBudget", ResourceBudget, http.StatusOK, true},
	cyclesv1.AdminService_CloseBudget_FullMethodName:    {"closeBudget", ResourceBudget, http.StatusOK, true},

	cyclesv1.OpsService_PauseSweeper_FullMethodName:       {"pauseSweeper", ResourceConfig, http.StatusOK, false},
	cyclesv1.OpsService_ResumeSweeper_FullMethodName:      {"resumeSweeper", ResourceConfig, http.StatusOK, false},
	cyclesv1.OpsService_TriggerSweep_FullMethodName:       {"triggerSweep", ResourceConfig, http.StatusOK, false},
	cyclesv1.OpsService_SweepTenant_FullMethodName:        {"sweepTenant", ResourceTenant, http.StatusOK, false},
	cyclesv1.OpsService_ResolveQuarantined_FullMethodName: {"resolveQuarantined", ResourceReservation, http.StatusOK, true},
	cyclesv1.OpsService_RepairTenant_FullMethodName:       {"repairTenant", ResourceTenant, http.StatusOK, true},

	cyclesv1.PolicyService_CreateScopePolicy_FullMethodName: {"createPolicy", ResourcePolicy, http.StatusCreated, true},
	cyclesv1.PolicyService_UpdateScopePolicy_FullMethodName: {"updatePolicy", ResourcePolicy, http.StatusOK, true},

	cyclesv1.QuotaCounterService_ResetActionQuotaCounter_FullMethodName: {"resetActionQuotaCounter", ResourceQuotaCounter, http.StatusOK, true},

	cyclesv1.RuntimeService_ReleaseReservation_FullMethodName: {"releaseReservation", ResourceReservation, http.StatusOK, true},

	// Bulk actions: one entry for the request (after it returns), plus one
	// per row, written by the row's own script (or its refusal).
	cyclesv1.OperatorService_BulkActionTenants_FullMethodName: {"bulkActionTenants", ResourceBulk, http.StatusOK, false},
	cyclesv1.OperatorService_BulkActionBudgets_FullMethodName: {"bulkActionBudgets", ResourceBulk, http.StatusOK, false},
}

// Audited reports whether calls of fullMethod are recorded in the audit trail.
func Audited(fullMethod string) bool {
	_, ok := operations[fullMethod]
	return ok
}

// target is the tenant and resource id a request names, read from its
// fields by name (every audited request names them the same way): tenant_id,
// key_id, scope_path + unit (a budget's ledger id "<scope_path>|<UNIT>"),
// reservation_id (whose id names its tenant). A request that failed to
// decode names nothing.
func target(resource string, req any) (tenant, id string) {
	m, ok := req.(proto.Message)
	if !ok {
		return "", ""
	}
	r := m.ProtoReflect()
	str := func(name protoreflect.Name) string {
		f := r.Descriptor().Fields().ByName(name)
		if f == nil || f.Kind() != protoreflect.StringKind {
			return ""
		}
		return r.Get(f).String()
	}
	tenant = str("tenant_id")
	switch resource {
	case ResourceTenant:
		id = tenant
	case ResourceAPIKey:
		id = str("key_id")
	case ResourceBudget:
		id = str("scope_path")
		if f := r.Descriptor().Fields().ByName("unit"); f != nil && f.Kind() == protoreflect.EnumKind {
			unit := cyclesv1.Unit(r.Get(f).Enum()).String()
			id += "|" + strings.TrimPrefix(unit, "UNIT_")
		}
	case ResourceReservation:
		id = str("reservation_id")
		if tenant == "" {
			tenant, _ = reservationid.Owner(id)
		}
	case ResourcePolicy:
		id = str("policy_id") // a create's id is set by its script
	case ResourceConfig:
		id = "sweeper"
	case ResourceQuotaCounter:
		if q, ok := m.(*cyclesv1.ResetActionQuotaCounterRequest); ok {
			kind := q.GetActionKind()
			if kind == actionkind.RiskCounter {
				kind += ":" + string(actionkind.RiskOf(q.GetRiskClass()))
			}
			id = q.GetScope() + "|" + kind + "|" + actionkind.WindowName(q.GetWindow()) + "|" + q.GetWindowKey()
		}
	case ResourceBulk:
		id = "bulk-action"
		if f := r.Descriptor().Fields().ByName("filter"); f != nil && f.Kind() == protoreflect.MessageKind && r.Has(f) {
			fm := r.Get(f).Message()
			if tf := fm.Descriptor().Fields().ByName("tenant_id"); tf != nil && tf.Kind() == protoreflect.StringKind {
				tenant = fm.Get(tf).String()
			}
		}
	}
	return tenant, id
}
