package cycleshttp

import (
	"net/http"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/protowire"
)

// The answers and request steps of the admin plane's other resources, each
// named by its RPC's entry in wires.go: event reads, scope policies,
// action-quota counters, usage reports, the audit trail, bulk actions and the
// overview.

// Event reads (governance spec: GET /v1/events for a tenant key, GET
// /v1/admin/events for the admin key), both over EventService.ListEvents,
// which decides what the caller may see. The webhook routes answer as a server
// without subscriptions (webhooks.go).

func eventWindow(req *cyclesv1.ListEventsRequest) error {
	return window("from", "to", req.FromMs, req.ToMs)
}

// envelopeShape is the protocol's Event envelope. The actor is omitted when
// it has no type; data's integer members are exact JSON integers (the
// data field's wire option).
var envelopeShape = protowire.ShapeOf("event_id", "event_type", "category", "timestamp", "tenant_id", "scope?", "actor?", "source",
	"data?", "request_id?", "trace_id?", "correlation_id?").
	Calc("actor", func(m protoreflect.Message) (any, bool) {
		act := m.Interface().(*cyclesv1.Event).GetActor()
		return actorShape.JSON(act.ProtoReflect()), act.GetType() != ""
	})

var actorShape = protowire.ShapeOf("type", "key_id?")

// Scope policies (governance v0.1.25 Policy) over PolicyService, admin key
// only: POST/GET /v1/admin/policies, GET and PATCH
// /v1/admin/policies/{policy_id}. The tenant of a get or patch comes from the
// policy id when tenant_id is not in the query (docs/http-api.md).

func tenantRequired(req *cyclesv1.ListScopePoliciesRequest) error {
	if req.TenantId == "" {
		return apierr.Invalid("tenant_id", "is required with the admin key")
	}
	return nil
}

// policyShape is the spec's Policy with the v0.1.26 governance lists,
// which are always present (the spec: empty lists, never omitted).
var policyShape = protowire.ShapeOf("policy_id", "name?", "description?", "scope_pattern", "priority", "caps?", "commit_overage_policy?",
	"reservation_ttl_override?", "rate_limits?", "status", "effective_from?", "effective_until?", "created_at", "updated_at?",
	"action_quotas", "risk_class_quotas", "allowed_action_kinds", "denied_action_kinds")

// The v0.1.26 action-quota counters over QuotaCounterService: GET (the
// admin key, or a tenant key with action_quotas:read or the deprecated
// balances:read, on its own tenant) and POST (admin key only):
// GET /v1/admin/action-quota-counters (tenant_id required; scope,
// action_kind, window, run_id, include_zero, limit, cursor) and POST
// /v1/admin/action-quota-counters/reset (ActionQuotaCounterResetRequest).

// keyTenant: without tenant_id, a tenant key lists its own tenant's counters
// (the key names it; the chain proves the key and the service confines it to
// that tenant); the admin key must name the tenant.
func keyTenant(_ *API, _ http.ResponseWriter, r *http.Request, req *cyclesv1.ListActionQuotaCountersRequest) error {
	if req.TenantId != "" {
		return nil
	}
	k, ok := auth.ParseAPIKey(r.Header.Get("X-Cycles-API-Key"))
	if !ok {
		return apierr.Invalid("tenant_id", "is required with the admin key")
	}
	req.TenantId = k.Tenant
	return nil
}

// quotaState is a quota counter on the wire; scope_path repeats scope (the
// spec names both).
var quotaState = protowire.ShapeOf("action_kind", "risk_class?", "scope", "scope_path=scope", "window", "window_key", "used", "limit",
	"remaining", "policy_id?", "expires_at?", "last_incremented_at?")

// Usage reports over UsageService, admin key only: GET /v1/admin/usage
// (tenant_id, from and to as ISO 8601 date-times, bucket hour|day,
// scope_prefix, scope_depth, unit); docs/archive.md#usage-reports.

// dailyByDefault: a report without bucket is by day.
func dailyByDefault(req *cyclesv1.QueryUsageRequest) error {
	if req.Bucket == cyclesv1.UsageBucket_USAGE_BUCKET_UNSPECIFIED {
		req.Bucket = cyclesv1.UsageBucket_USAGE_BUCKET_DAY
	}
	return nil
}

// bucketParam reads hour or day, in any case.
func bucketParam(name, s string) (protoreflect.Value, error) {
	switch b := strings.ToLower(s); b {
	case "day":
		return protoreflect.ValueOfEnum(cyclesv1.UsageBucket_USAGE_BUCKET_DAY.Number()), nil
	case "hour":
		return protoreflect.ValueOfEnum(cyclesv1.UsageBucket_USAGE_BUCKET_HOUR.Number()), nil
	default:
		return protoreflect.Value{}, apierr.Invalid(name, "must be hour or day, got %q", b)
	}
}

// The audit trail (GET /v1/admin/audit/logs; AuditService on gRPC).

func newestFirst(name, s string) (protoreflect.Value, error) {
	if d := strings.ToLower(s); d != "desc" {
		return protoreflect.Value{}, apierr.Invalid(name, "only desc (newest first) is supported")
	}
	return protoreflect.Value{}, nil
}

// Bulk actions (OperatorService on gRPC): POST /v1/admin/tenants/bulk-action
// and POST /v1/admin/budgets/bulk-action.

// spentOnlyToReset: spent belongs to RESET_SPENT only, and the wire ignores
// it with any other action (rather than failing every row).
func spentOnlyToReset(req *cyclesv1.BulkActionBudgetsRequest) error {
	if req.GetAction() != cyclesv1.FundingOperation_FUNDING_OPERATION_RESET_SPENT {
		req.Spent = nil
	}
	return nil
}

// GET /v1/admin/overview (AdminOverviewResponse) over
// OverviewService.GetOverview. cyclesd keeps no webhook subscriptions
// (webhooks.go), so the webhook parts are zeros and empty lists. The
// extension field coverage says how much the bounded walk read
// (docs/protocol.md#admin-overview).

// overviewShape is the protocol's AdminOverviewResponse plus coverage: the
// proto's shape, with the webhook members cyclesd never has as constants;
// its scope lists leave out their tenant_id.
var overviewShape = protowire.ShapeOf("as_of", "event_window_seconds", "tenant_counts", "budget_counts", "over_limit_scopes",
	"debt_scopes", "webhook_counts", "failing_webhooks", "event_counts", "recent_denials", "recent_expiries",
	"recent_denials_by_reason", "coverage").
	Nest("over_limit_scopes", protowire.ShapeOf("scope", "unit", "allocated", "remaining", "debt")).
	Nest("debt_scopes", protowire.ShapeOf("scope", "unit", "debt", "overdraft_limit")).
	Fixed("webhook_counts", `{"total":0,"active":0,"disabled":0,"with_failures":0}`).
	Fixed("failing_webhooks", `[]`)
