package cycleshttp

import (
	"cmp"
	"context"

	"google.golang.org/protobuf/proto"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/api/authapi"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/policy"
	"github.com/cyclesgo/cycles-go/internal/protowire"
)

// wires are the routed RPCs' declarations beside their routes (route.go),
// for those that have any; each names an RPC that has routes (New panics
// otherwise, in every test).
var wires = map[string]wire{
	// Runtime (cycles-protocol-v0). The admin key may get, list and release
	// reservations on a tenant's behalf: the methods' access option
	// (admin_on_behalf_of) says so, and the chain runs them as that tenant.
	"RuntimeService/CreateReservation": {terse: terse(func(req *cyclesv1.CreateReservationRequest, p *cyclesv1.CreateReservationResponse) (bool, bool, string) {
		return req.GetObserveMode() != 0 || req.GetAction().GetPolicyKeys() != nil, p.GetObserved(), p.GetReasonCode()
	})},
	"RuntimeService/Decide": {terse: terse(func(req *cyclesv1.DecideRequest, p *cyclesv1.DecideResponse) (bool, bool, string) {
		return req.GetAction().GetPolicyKeys() != nil, false, p.GetReasonCode()
	})},
	"RuntimeService/ListReservations": {after: check(listChecks), params: parsers{"sort_by": sortByParam, "sort_dir": sortDirParam}},

	// The admin surface a Cycles quickstart needs (cycles-governance-admin
	// v0.1.25). GET /v1/admin/tenants is always in tenant_id order (sort_by,
	// sort_dir and observe_mode are ignored, as the spec allows); without
	// tenant_id, the api-keys and budgets lists walk every tenant.
	"AdminService/ListTenants":    {params: parsers{"parent_tenant_id": refused(noHierarchy)}},
	"AdminService/UpdateTenant":   {mount: closeOrUpdate},
	"AdminService/ListApiKeys":    {mount: expiredKeys},
	"AdminService/RevokeApiKey":   {before: keyPath},
	"AdminService/UpdateApiKey":   {before: keyPath},
	"AdminService/CreateBudget":   {after: scoped},
	"AdminService/GetBudget":      {before: scoped},
	"AdminService/UpdateBudget":   {before: scoped},
	"AdminService/FundBudget":     {before: scoped},
	"AdminService/FreezeBudget":   {before: scoped},
	"AdminService/UnfreezeBudget": {before: scoped},
	"AdminService/CloseBudget":    {before: scoped},
	// Introspection answers who the credential is, with or without the
	// auth service: the admin ("*") or a tenant key with its permissions.
	"AuthService/Introspect": {call: func(ctx context.Context, _ proto.Message) (any, error) { return authapi.Introspect(ctx) }},

	// Event reads (the tenant's GET /v1/events and the admin's) check their
	// window; an event id names its tenant, so GetEvent needs no tenant_id.
	"EventService/ListEvents": {after: check(func(req *cyclesv1.ListEventsRequest) error { return window("from", "to", req.FromMs, req.ToMs) })},

	// Scope policies: tenant_id is required to list; a get or patch takes
	// the tenant from the policy id when tenant_id is not in the query.
	"PolicyService/ListScopePolicies": {after: check(func(req *cyclesv1.ListScopePoliciesRequest) error {
		if req.TenantId == "" {
			return apierr.Invalid("tenant_id", "is required with the admin key")
		}
		return nil
	})},
	"PolicyService/GetScopePolicy":    {before: tenantFrom("policy_id", policy.TenantOf)},
	"PolicyService/UpdateScopePolicy": {before: tenantFrom("policy_id", policy.TenantOf)},

	"QuotaCounterService/ListActionQuotaCounters": {after: keyTenant},
	// A usage report without bucket is by day.
	"UsageService/QueryUsage": {params: parsers{"bucket": bucketParam}, after: check(func(req *cyclesv1.QueryUsageRequest) error {
		req.Bucket = cmp.Or(req.Bucket, cyclesv1.UsageBucket_USAGE_BUCKET_DAY)
		return nil
	})},
	// Audit entries are read newest first; an ascending order is refused
	// rather than silently reversed.
	"AuditService/ListAuditLogs":        {params: parsers{"sort_dir": newestFirst}},
	"OperatorService/BulkActionBudgets": {after: check(spentOnlyToReset)},
	"ActionKindService/ListActionKinds": {params: parsers{"risk_class": riskParam, "limit": kindLimit}, mount: cached},
	"ActionKindService/GetActionKind":   {mount: cached},
}

// answerShapes are the answers whose spec differs from their message's
// fields in proto order (protowire.Shapes: the others are written in their
// default shape, as their fields' wire options say).
func answerShapes() *protowire.Shapes {
	return protowire.NewShapes().
		For(&cyclesv1.Balance{}, balanceShape).For(&cyclesv1.Reservation{}, reservationShape).
		For(&cyclesv1.CreateReservationResponse{}, reserveAnswer).For(&cyclesv1.DecideResponse{}, decideAnswer).
		For(&cyclesv1.CommitReservationResponse{}, commitAnswer).For(&cyclesv1.ReleaseReservationResponse{}, releaseAnswer).
		For(&cyclesv1.ExtendReservationResponse{}, extendAnswer).For(&cyclesv1.CreateEventResponse{}, eventAnswer).
		For(&cyclesv1.Tenant{}, tenantShape).For(&cyclesv1.CloseTenantResponse{}, tenantShape.Of("tenant")).
		For(&cyclesv1.ApiKey{}, apiKeyShape).For(&cyclesv1.CreateApiKeyResponse{}, newKeyShape).
		For(&cyclesv1.Budget{}, ledgerShape).For(&cyclesv1.FundBudgetResponse{}, fundShape).
		For(&cyclesv1.ValidateResponse{}, validateShape).
		For(&cyclesv1.Event{}, envelopeShape).For(&cyclesv1.ScopePolicy{}, policyShape).
		For(&cyclesv1.ActionQuotaState{}, quotaState).For(&cyclesv1.GetOverviewResponse{}, overviewShape)
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
