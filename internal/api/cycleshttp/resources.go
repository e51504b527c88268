package cycleshttp

import (
	"net/http"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/protowire"
)

// The answer shapes and request steps of the admin plane's other resources
// (events, scope policies, action-quota counters, usage, audit, bulk actions,
// the overview), each named by its RPC's entry in wires.go; their routes and
// access rules are on the RPCs (proto/cycles/v1).

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

// policyShape is the spec's Policy (no tenant_id) with the v0.1.26
// governance lists, which are always present (the spec: empty lists, never
// omitted).
var policyShape = protowire.ShapeOf("policy_id", "name?", "description?", "scope_pattern", "priority", "caps?", "commit_overage_policy?",
	"reservation_ttl_override?", "rate_limits?", "status", "effective_from?", "effective_until?", "created_at", "updated_at?",
	"action_quotas", "risk_class_quotas", "allowed_action_kinds", "denied_action_kinds")

// keyTenant: without tenant_id, a tenant key lists its own tenant's counters
// (the key names it; the chain proves the key and the service confines it to
// that tenant); the admin key must name the tenant.
func keyTenant(_ *API, _ http.ResponseWriter, r *http.Request, req proto.Message) error {
	if q := req.(*cyclesv1.ListActionQuotaCountersRequest); q.TenantId == "" {
		k, ok := auth.ParseAPIKey(r.Header.Get("X-Cycles-API-Key"))
		if !ok {
			return apierr.Invalid("tenant_id", "is required with the admin key")
		}
		q.TenantId = k.Tenant
	}
	return nil
}

// quotaState is a quota counter on the wire; scope_path repeats scope (the
// spec names both).
var quotaState = protowire.ShapeOf("action_kind", "risk_class?", "scope", "scope_path=scope", "window", "window_key", "used", "limit",
	"remaining", "policy_id?", "expires_at?", "last_incremented_at?")

// bucketParam reads a usage report's bucket, hour or day, in any case.
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

// newestFirst reads the audit trail's sort_dir: only desc.
func newestFirst(name, s string) (protoreflect.Value, error) {
	if d := strings.ToLower(s); d != "desc" {
		return protoreflect.Value{}, apierr.Invalid(name, "only desc (newest first) is supported")
	}
	return protoreflect.Value{}, nil
}

// spentOnlyToReset: a budget bulk action's spent belongs to RESET_SPENT
// only, and the wire ignores it with any other action (rather than failing
// every row).
func spentOnlyToReset(req *cyclesv1.BulkActionBudgetsRequest) error {
	if req.GetAction() != cyclesv1.FundingOperation_FUNDING_OPERATION_RESET_SPENT {
		req.Spent = nil
	}
	return nil
}

// overviewShape is the protocol's AdminOverviewResponse plus coverage (how
// much the bounded walk read, docs/protocol.md#admin-overview): the proto's
// shape, with the webhook members cyclesd never has (webhooks.go) as
// constants; its scope lists leave out their tenant_id.
var overviewShape = protowire.ShapeOf("as_of", "event_window_seconds", "tenant_counts", "budget_counts", "over_limit_scopes",
	"debt_scopes", "webhook_counts", "failing_webhooks", "event_counts", "recent_denials", "recent_expiries",
	"recent_denials_by_reason", "coverage").
	Nest("over_limit_scopes", protowire.ShapeOf("scope", "unit", "allocated", "remaining", "debt")).
	Nest("debt_scopes", protowire.ShapeOf("scope", "unit", "debt", "overdraft_limit")).
	Fixed("webhook_counts", `{"total":0,"active":0,"disabled":0,"with_failures":0}`).
	Fixed("failing_webhooks", `[]`)
