package cycleshttp

import (
	"context"

	"google.golang.org/protobuf/proto"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/api/authapi"
	"github.com/cyclesgo/cycles-go/internal/policy"
	"github.com/cyclesgo/cycles-go/internal/protowire"
)

// wires are the routed RPCs' declarations beside their routes (route.go):
// every RPC with a (cycles.v1.http) option has one, and each names an RPC
// that has routes (New panics otherwise, in every test).
var wires = map[string]wire{
	// Runtime (cycles-protocol-v0). The admin key may get, list and release
	// reservations on a tenant's behalf: the methods' access option
	// (admin_on_behalf_of) says so, and the chain runs them as that tenant.
	"RuntimeService/CreateReservation": {encode: detailed(reserveAnswer,
		func(req *cyclesv1.CreateReservationRequest, p *cyclesv1.CreateReservationResponse) bool {
			return showDenyDetail(req.GetObserveMode() != 0 || req.GetAction().GetPolicyKeys() != nil, p.GetObserved(), p.GetReasonCode())
		})},
	"RuntimeService/Decide": {encode: detailed(decideAnswer,
		func(req *cyclesv1.DecideRequest, p *cyclesv1.DecideResponse) bool {
			return showDenyDetail(req.GetAction().GetPolicyKeys() != nil, false, p.GetReasonCode())
		})},
	"RuntimeService/CreateEvent":        {answer: eventAnswer},
	"RuntimeService/CommitReservation":  {answer: commitAnswer},
	"RuntimeService/ReleaseReservation": {answer: releaseAnswer},
	"RuntimeService/ExtendReservation":  {answer: extendAnswer},
	"RuntimeService/GetReservation":     {answer: reservationShape.Of("reservation")},
	"RuntimeService/ListReservations": {answer: page("reservations").Nest("reservations", reservationShape),
		after: check(listChecks), params: parsers{"sort_by": sortByParam, "sort_dir": sortDirParam}},
	"RuntimeService/GetBalances": {answer: page("balances").Nest("balances", balanceShape)},

	// The admin surface a Cycles quickstart needs (cycles-governance-admin
	// v0.1.25). GET /v1/admin/tenants is always in tenant_id order (sort_by,
	// sort_dir and observe_mode are ignored, as the spec allows); without
	// tenant_id, the api-keys and budgets lists walk every tenant.
	"AdminService/CreateTenant": {answer: tenantShape.Of("tenant")},
	"AdminService/ListTenants": {answer: page("tenants").Nest("tenants", tenantShape),
		params: parsers{"parent_tenant_id": refused(noHierarchy)}},
	"AdminService/GetTenant":      {answer: tenantShape.Of("tenant")},
	"AdminService/UpdateTenant":   {answer: tenantShape.Of("tenant"), mount: closeOrUpdate},
	"AdminService/CreateApiKey":   {answer: newKeyShape},
	"AdminService/ListApiKeys":    {answer: page("keys=api_keys").Nest("keys", apiKeyShape), mount: expiredKeys},
	"AdminService/RevokeApiKey":   {answer: apiKeyShape.Of("api_key"), before: keyPath},
	"AdminService/UpdateApiKey":   {answer: apiKeyShape.Of("api_key"), before: keyPath},
	"AdminService/CreateBudget":   {answer: ledgerShape.Of("budget"), after: scoped},
	"AdminService/ListBudgets":    {answer: page("ledgers=budgets").Nest("ledgers", ledgerShape)},
	"AdminService/GetBudget":      {answer: ledgerShape.Of("budget"), before: scoped},
	"AdminService/UpdateBudget":   {answer: ledgerShape.Of("budget"), before: scoped},
	"AdminService/FundBudget":     {answer: fundShape, before: scoped},
	"AdminService/FreezeBudget":   {answer: ledgerShape.Of("budget"), before: scoped},
	"AdminService/UnfreezeBudget": {answer: ledgerShape.Of("budget"), before: scoped},
	"AdminService/CloseBudget":    {answer: ledgerShape.Of("budget"), before: scoped},
	// Introspection answers who the credential is, with or without the
	// auth service: the admin ("*") or a tenant key with its permissions.
	"AuthService/Introspect": {answer: introspectShape, call: func(ctx context.Context, _ proto.Message) (any, error) {
		return authapi.Introspect(ctx)
	}},
	"AuthService/Validate": {answer: validateShape},

	// Event reads: the tenant's (GET /v1/events) and the admin's; an event
	// id names its tenant, so GetEvent needs no tenant_id.
	"EventService/ListEvents": {answer: page("events").Nest("events", envelopeShape), after: check(eventWindow)},
	"EventService/GetEvent":   {answer: envelopeShape.Of("event")},

	// Scope policies: tenant_id is required to list; a get or patch takes
	// the tenant from the policy id when tenant_id is not in the query.
	"PolicyService/CreateScopePolicy": {answer: policyShape.Of("policy")},
	"PolicyService/ListScopePolicies": {answer: page("policies").Nest("policies", policyShape), after: check(tenantRequired)},
	"PolicyService/GetScopePolicy":    {answer: policyShape.Of("policy"), before: tenantFrom("policy_id", policy.TenantOf)},
	"PolicyService/UpdateScopePolicy": {answer: policyShape.Of("policy"), before: tenantFrom("policy_id", policy.TenantOf)},

	"QuotaCounterService/ListActionQuotaCounters": {answer: page("counters").Nest("counters", quotaState), after: typed(keyTenant)},
	"QuotaCounterService/ResetActionQuotaCounter": {answer: protowire.ShapeOf("counter", "previous_used").Nest("counter", quotaState)},
	"UsageService/QueryUsage":                     {answer: usageReport, after: check(dailyByDefault), params: parsers{"bucket": bucketParam}},
	// Audit entries are read newest first; an ascending order is refused
	// rather than silently reversed.
	"AuditService/ListAuditLogs":        {answer: auditPage, params: parsers{"sort_dir": newestFirst}},
	"OperatorService/BulkActionTenants": {answer: bulkShape},
	"OperatorService/BulkActionBudgets": {answer: bulkShape, after: check(spentOnlyToReset)},
	"OverviewService/GetOverview":       {answer: overviewShape},
	"ActionKindService/ListActionKinds": {answer: protowire.ShapeOf("version", "kinds", "next_cursor?", "has_more").Nest("kinds", actionKindShape),
		params: parsers{"risk_class": riskParam, "limit": kindLimit}, mount: cached},
	"ActionKindService/GetActionKind": {answer: actionKindShape.Of("kind"), mount: cached},
}

// noHierarchy refuses the spec's parent tenant filter.
const noHierarchy = "tenant hierarchies are not supported by cyclesd"

// offWhy says why a service's routes answer 404 when it is not enabled.
var offWhy = map[string]string{
	"RuntimeService":      "its service is not enabled on this server",
	"AdminService":        "the admin service is not enabled on this server",
	"AuthService":         "key validation is not enabled on this server",
	"EventService":        "the event service is not enabled on this server",
	"PolicyService":       "the policy service is not enabled on this server",
	"QuotaCounterService": "the quota counter service is not enabled on this server",
	"UsageService":        "usage reports need the archive (-archive-dsn) on this server",
	"AuditService":        "the audit trail is not enabled on this server",
	"OperatorService":     "bulk actions are not enabled on this server",
	"OverviewService":     "the admin overview is not enabled on this server",
}
