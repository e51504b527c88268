package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
	"github.com/cyclesgo/cycles-go/test/redistest"
)

// TestEveryEventTypeIsProducedAndTyped drives a real cyclesd through every
// operation that emits an event and reads the log back: each EventType
// arrives with its typed payload and exact int64 amounts.
func TestEveryEventTypeIsProducedAndTyped(t *testing.T) {
	d := startDaemon(t, []string{"CYCLESD_ADMIN_KEY=" + adminKey}, "-sweeper-interval", "100ms")
	d.waitServing(t)
	conn := d.conn(t)
	admin := cyclesv1.NewAdminServiceClient(conn)
	runtime := cyclesv1.NewRuntimeServiceClient(conn)
	events := cyclesv1.NewEventServiceClient(conn)
	ctx := adminCtx()
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	const tenant, scope = "evt", "tenant:evt"
	const big = int64(1)<<53 + 1
	tok := cyclesv1.Unit_UNIT_TOKENS
	usd := cyclesv1.Unit_UNIT_USD_MICROCENTS

	must(admin.CreateTenant(ctx, &cyclesv1.CreateTenantRequest{TenantId: tenant, Name: "Events"}))
	key, err := admin.CreateApiKey(ctx, &cyclesv1.CreateApiKeyRequest{TenantId: tenant, Name: "agent", Permissions: []string{"reservations:create", "reservations:commit", "reservations:release", "events:read"}})
	must(key, err)
	agent := keyCtx(key.GetSecret())
	must(admin.CreateBudget(ctx, &cyclesv1.CreateBudgetRequest{TenantId: tenant, ScopePath: scope, Unit: tok, Allocated: 1000}))
	must(admin.CreateBudget(ctx, &cyclesv1.CreateBudgetRequest{TenantId: tenant, ScopePath: scope, Unit: usd, Allocated: big}))
	must(admin.UpdateBudget(ctx, &cyclesv1.UpdateBudgetRequest{TenantId: tenant, ScopePath: scope, Unit: tok, OverdraftLimit: ptr(int64(500))}))
	fund := func(op cyclesv1.FundingOperation, amount int64) {
		t.Helper()
		must(admin.FundBudget(ctx, &cyclesv1.FundBudgetRequest{TenantId: tenant, ScopePath: scope, Unit: tok,
			Operation: op, Amount: amount, IdempotencyKey: fmt.Sprintf("f-%d-%d", op, amount)}))
	}
	fund(cyclesv1.FundingOperation_FUNDING_OPERATION_CREDIT, 100)
	fund(cyclesv1.FundingOperation_FUNDING_OPERATION_DEBIT, 100)
	fund(cyclesv1.FundingOperation_FUNDING_OPERATION_RESET, 1000)
	fund(cyclesv1.FundingOperation_FUNDING_OPERATION_RESET_SPENT, 1000)

	action := &cyclesv1.Action{Kind: "llm.completion", Name: "m"}
	dec, err := runtime.Decide(agent, &cyclesv1.DecideRequest{IdempotencyKey: "d1", Subject: &cyclesv1.Subject{Workspace: "w"},
		Action: action, Estimate: &cyclesv1.Amount{Unit: tok, Amount: big}})
	must(dec, err)
	// v0.1.26 observe mode: what enforcement would decide, as an event.
	for i, amount := range []int64{1, big} { // observed_allowed, observed_denied
		must(runtime.CreateReservation(agent, &cyclesv1.CreateReservationRequest{IdempotencyKey: fmt.Sprintf("obs-%d", i),
			Subject: &cyclesv1.Subject{Workspace: "w"}, Action: action, Estimate: &cyclesv1.Amount{Unit: tok, Amount: amount},
			ObserveMode: cyclesv1.ObserveMode_OBSERVE_MODE_OBSERVE}))
	}
	// v0.1.26 quotas: the first call of a kind capped at 1 per hour crosses
	// the default 80 % threshold (released: the hold plays no part below).
	// Its counter is listed and reset below in the same hour: the daemon's
	// embedded store keeps this host's clock, as an embedded store here does.
	ledgertest.ClearOfBoundary(t, redistest.Embedded(t), time.Hour, 30*time.Second)
	policies := cyclesv1.NewPolicyServiceClient(conn)
	pol, err := policies.CreateScopePolicy(ctx, &cyclesv1.CreateScopePolicyRequest{TenantId: tenant,
		Name: "mail", ScopePattern: "*", ActionQuotas: []*cyclesv1.ActionQuota{{ActionKind: "message.email.send", MaxCalls: 1,
			Window: cyclesv1.ActionQuotaWindow_ACTION_QUOTA_WINDOW_PER_HOUR_TUMBLING}}})
	must(pol, err)
	must(policies.UpdateScopePolicy(ctx, &cyclesv1.UpdateScopePolicyRequest{TenantId: tenant, PolicyId: pol.GetPolicy().GetPolicyId(),
		Description: ptr("mail quota")}))
	mail, err := runtime.CreateReservation(agent, &cyclesv1.CreateReservationRequest{IdempotencyKey: "mail-1",
		Subject: &cyclesv1.Subject{Workspace: "w"}, Action: &cyclesv1.Action{Kind: "message.email.send", Name: "m"},
		Estimate: &cyclesv1.Amount{Unit: tok, Amount: 1}})
	must(mail, err)
	must(runtime.ReleaseReservation(agent, &cyclesv1.ReleaseReservationRequest{ReservationId: mail.GetReservationId(), IdempotencyKey: "mail-r"}))
	qc := cyclesv1.NewQuotaCounterServiceClient(conn)
	cs, err := qc.ListActionQuotaCounters(ctx, &cyclesv1.ListActionQuotaCountersRequest{TenantId: tenant})
	must(cs, err)
	if len(cs.GetCounters()) != 1 || cs.GetCounters()[0].GetUsed() != 1 {
		t.Fatalf("counters: %v", cs)
	}
	c0 := cs.GetCounters()[0]
	must(qc.ResetActionQuotaCounter(ctx, &cyclesv1.ResetActionQuotaCounterRequest{TenantId: tenant, Scope: c0.GetScope(),
		ActionKind: c0.GetActionKind(), Window: c0.GetWindow(), WindowKey: c0.GetWindowKey(), Reason: "e2e"}))
	reserve := func(id string, amount int64, ttl *int64) string {
		t.Helper()
		res, err := runtime.CreateReservation(agent, &cyclesv1.CreateReservationRequest{IdempotencyKey: id,
			Subject: &cyclesv1.Subject{Workspace: "w"}, Action: action, Estimate: &cyclesv1.Amount{Unit: tok, Amount: amount},
			TtlMs: ttl, GracePeriodMs: ptr(int64(0)), OveragePolicy: cyclesv1.CommitOveragePolicy_COMMIT_OVERAGE_POLICY_ALLOW_WITH_OVERDRAFT})
		must(res, err)
		return res.GetReservationId()
	}
	rid := reserve("r1", 1000, nil) // remaining 1000 -> 0: budget.exhausted
	must(runtime.CommitReservation(agent, &cyclesv1.CommitReservationRequest{ReservationId: rid, IdempotencyKey: "c1",
		Actual: &cyclesv1.Amount{Unit: tok, Amount: 1200}})) // commit_overage, debt_incurred 200
	must(admin.UpdateBudget(ctx, &cyclesv1.UpdateBudgetRequest{TenantId: tenant, ScopePath: scope, Unit: tok, OverdraftLimit: ptr(int64(100))})) // over_limit_entered
	fund(cyclesv1.FundingOperation_FUNDING_OPERATION_REPAY_DEBT, 300)                                                                            // debt_repaid, over_limit_exited
	must(admin.FreezeBudget(ctx, &cyclesv1.FreezeBudgetRequest{TenantId: tenant, ScopePath: scope, Unit: tok}))
	must(admin.UnfreezeBudget(ctx, &cyclesv1.UnfreezeBudgetRequest{TenantId: tenant, ScopePath: scope, Unit: tok}))
	reserve("r-expires", 10, ptr(int64(1000)))
	must(admin.UpdateTenant(ctx, &cyclesv1.UpdateTenantRequest{TenantId: tenant, Name: ptr("Events 2")}))
	must(admin.UpdateTenant(ctx, &cyclesv1.UpdateTenantRequest{TenantId: tenant, Status: cyclesv1.TenantStatus_TENANT_STATUS_SUSPENDED}))
	must(admin.UpdateTenant(ctx, &cyclesv1.UpdateTenantRequest{TenantId: tenant, Status: cyclesv1.TenantStatus_TENANT_STATUS_ACTIVE}))
	must(admin.CloseBudget(ctx, &cyclesv1.CloseBudgetRequest{TenantId: tenant, ScopePath: scope, Unit: usd}))

	// Wait for the sweeper's reservation.expired before the tenant closes.
	list := func(types ...cyclesv1.EventType) []*cyclesv1.Event {
		t.Helper()
		res, err := events.ListEvents(ctx, &cyclesv1.ListEventsRequest{TenantId: tenant, Limit: 200, Types: types})
		must(res, err)
		return res.GetEvents()
	}
	deadline := time.Now().Add(15 * time.Second)
	for len(list(cyclesv1.EventType_EVENT_TYPE_RESERVATION_EXPIRED)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no reservation.expired")
		}
		time.Sleep(100 * time.Millisecond)
	}
	reserve("r-open", 5, nil)
	must(admin.UpdateApiKey(ctx, &cyclesv1.UpdateApiKeyRequest{TenantId: tenant, KeyId: key.GetApiKey().GetKeyId(),
		Permissions: &cyclesv1.ApiKeyStrings{Values: []string{"reservations:create", "reservations:commit", "reservations:release", "events:read", "balances:read"}}}))
	must(admin.RevokeApiKey(ctx, &cyclesv1.RevokeApiKeyRequest{TenantId: tenant, KeyId: key.GetApiKey().GetKeyId()}))
	must(admin.CloseTenant(context.WithoutCancel(ctx), &cyclesv1.CloseTenantRequest{TenantId: tenant}))

	byType := map[cyclesv1.EventType][]*cyclesv1.Event{}
	for _, ev := range list() {
		if ev.GetPayload() == nil {
			t.Errorf("%s arrived without a typed payload: %v", ev.GetEventType(), ev.GetData())
		}
		byType[ev.GetType()] = append(byType[ev.GetType()], ev)
	}
	// The operator repair events come from OpsService's incident suite;
	// their decoding is covered by TestTypedDecodesTheStoredForm.
	producedElsewhere := map[cyclesv1.EventType]bool{
		cyclesv1.EventType_EVENT_TYPE_RESERVATION_QUARANTINE_RESOLVED: true,
		cyclesv1.EventType_EVENT_TYPE_TENANT_LEDGER_REPAIRED:          true,
	}
	for num, name := range cyclesv1.EventType_name {
		if typ := cyclesv1.EventType(num); num != 0 && !producedElsewhere[typ] && len(byType[typ]) == 0 {
			t.Errorf("no %s event was produced", name)
		}
	}
	if t.Failed() {
		return
	}
	first := func(typ cyclesv1.EventType) *cyclesv1.Event { return byType[typ][0] }
	if p := first(cyclesv1.EventType_EVENT_TYPE_RESERVATION_DENIED).GetReservationDenied(); p.GetRequestedAmount() != big ||
		p.GetReasonCode() != "BUDGET_EXCEEDED" || p.GetAction().GetKind() != "llm.completion" || p.GetSubject().GetWorkspace() != "w" {
		t.Errorf("reservation.denied: %v", p)
	}
	if p := first(cyclesv1.EventType_EVENT_TYPE_RESERVATION_COMMIT_OVERAGE).GetCommitOverage(); p.GetEstimatedAmount() != 1000 ||
		p.GetActualAmount() != 1200 || p.GetOverage() != 200 || p.GetDebtIncurred() != 200 ||
		p.GetOveragePolicy() != cyclesv1.CommitOveragePolicy_COMMIT_OVERAGE_POLICY_ALLOW_WITH_OVERDRAFT {
		t.Errorf("reservation.commit_overage: %v", p)
	}
	if p := first(cyclesv1.EventType_EVENT_TYPE_BUDGET_DEBT_INCURRED).GetBudgetDebtIncurred(); p.GetDebtIncurred() != 200 || p.GetTotalDebt() != 200 || p.GetOverdraftLimit() != 500 {
		t.Errorf("budget.debt_incurred: %v", p)
	}
	if p := first(cyclesv1.EventType_EVENT_TYPE_BUDGET_OVER_LIMIT_ENTERED).GetBudgetOverLimit(); !p.GetIsOverLimit() || p.GetDebt() != 200 || p.GetOverdraftLimit() != 100 {
		t.Errorf("budget.over_limit_entered: %v", p)
	}
	if p := first(cyclesv1.EventType_EVENT_TYPE_RESERVATION_EXPIRED).GetReservationExpired(); p.GetEstimatedAmount() != 10 ||
		p.GetTtlMs() != 1000 || p.GetExpiresAtMs() <= 0 || p.GetUnit() != tok {
		t.Errorf("reservation.expired: %v", p)
	}
	for _, ev := range byType[cyclesv1.EventType_EVENT_TYPE_BUDGET_CREATED] {
		if p := ev.GetBudgetChanged(); p.GetUnit() == usd && p.GetNewState().GetAllocated() != big {
			t.Errorf("budget.created lost 2^53+1: %v", p)
		}
	}
	if p := first(cyclesv1.EventType_EVENT_TYPE_RESERVATION_RELEASED_VIA_TENANT_CASCADE).GetReservationReleased(); p.GetReleasedAmount() != 5 ||
		p.GetNewStatus() != cyclesv1.ReservationStatus_RESERVATION_STATUS_RELEASED {
		t.Errorf("reservation.released_via_tenant_cascade: %v", p)
	}
	if p := first(cyclesv1.EventType_EVENT_TYPE_QUOTA_THRESHOLD_APPROACHING).GetQuotaThresholdApproaching(); p.GetUsed() != 1 ||
		p.GetLimit() != 1 || p.GetThresholdPct() != 0.8 || p.GetActionKind() != "message.email.send" || p.GetScope() != scope+"/workspace:w" ||
		p.GetWindow() != cyclesv1.ActionQuotaWindow_ACTION_QUOTA_WINDOW_PER_HOUR_TUMBLING || p.GetTenantId() != tenant {
		t.Errorf("quota.threshold_approaching: %v", p)
	}
	if p := first(cyclesv1.EventType_EVENT_TYPE_QUOTA_COUNTER_RESET).GetQuotaCounterReset(); p.GetPreviousUsed() != 1 ||
		p.GetLimit() != 1 || p.GetReason() != "e2e" || p.GetActorId() != "admin" || p.GetWindowKey() == "" {
		t.Errorf("quota.counter_reset: %v", p)
	}
	if p := first(cyclesv1.EventType_EVENT_TYPE_TENANT_SUSPENDED).GetTenantChanged(); p.GetNewStatus() != cyclesv1.TenantStatus_TENANT_STATUS_SUSPENDED {
		t.Errorf("tenant.suspended: %v", p)
	}
	if p := first(cyclesv1.EventType_EVENT_TYPE_API_KEY_REVOKED).GetApiKeyChanged(); p.GetNewStatus() != cyclesv1.ApiKeyStatus_API_KEY_STATUS_REVOKED {
		t.Errorf("api_key.revoked: %v", p)
	}
	if p := first(cyclesv1.EventType_EVENT_TYPE_API_KEY_PERMISSIONS_CHANGED).GetApiKeyChanged(); p.GetKeyId() != key.GetApiKey().GetKeyId() ||
		p.GetNewStatus() != cyclesv1.ApiKeyStatus_API_KEY_STATUS_ACTIVE || len(p.GetChangedFields()) != 1 || p.GetChangedFields()[0] != "permissions" {
		t.Errorf("api_key.permissions_changed: %v", p)
	}
	if p := first(cyclesv1.EventType_EVENT_TYPE_POLICY_UPDATED).GetPolicyChanged(); p.GetPolicyId() != pol.GetPolicy().GetPolicyId() ||
		p.GetName() != "mail" || len(p.GetChangedFields()) != 1 || p.GetChangedFields()[0] != "description" {
		t.Errorf("policy.updated: %v", p)
	}

	// The typed filter selects exactly those types, on List and Watch.
	for _, ev := range list(cyclesv1.EventType_EVENT_TYPE_BUDGET_FUNDED, cyclesv1.EventType_EVENT_TYPE_BUDGET_DEBITED) {
		if ev.GetType() != cyclesv1.EventType_EVENT_TYPE_BUDGET_FUNDED && ev.GetType() != cyclesv1.EventType_EVENT_TYPE_BUDGET_DEBITED {
			t.Errorf("filter let %s through", ev.GetEventType())
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	stream, err := events.WatchEvents(wctx, &cyclesv1.WatchEventsRequest{TenantId: tenant,
		Start: cyclesv1.StartPosition_START_POSITION_EARLIEST, Types: []cyclesv1.EventType{cyclesv1.EventType_EVENT_TYPE_TENANT_CLOSED}})
	must(stream, err)
	for {
		res, err := stream.Recv()
		must(res, err)
		if ev := res.GetEvent(); ev != nil {
			if ev.GetType() != cyclesv1.EventType_EVENT_TYPE_TENANT_CLOSED || ev.GetTenantChanged().GetNewStatus() != cyclesv1.TenantStatus_TENANT_STATUS_CLOSED {
				t.Fatalf("watch filter: %v", ev)
			}
			break
		}
	}
}

func ptr[T any](v T) *T { return &v }
