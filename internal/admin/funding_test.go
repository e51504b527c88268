package admin

import (
	"context"
	"fmt"
	"math/big"
	"reflect"
	"strconv"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
	"github.com/cyclesgo/cycles-go/test/redistest"
)

const (
	credit     = cyclesv1.FundingOperation_FUNDING_OPERATION_CREDIT
	debit      = cyclesv1.FundingOperation_FUNDING_OPERATION_DEBIT
	reset      = cyclesv1.FundingOperation_FUNDING_OPERATION_RESET
	resetSpent = cyclesv1.FundingOperation_FUNDING_OPERATION_RESET_SPENT
	repayDebt  = cyclesv1.FundingOperation_FUNDING_OPERATION_REPAY_DEBT

	p53 = "9007199254740993"    // 2^53 + 1: not representable as a double
	max = "9223372036854775807" // 2^63 - 1
)

// ledgerState is a budget's amounts as decimal strings ("" = "0").
type ledgerState struct {
	allocated, reserved, spent, debt, limit string
	over                                    bool
}

func z(s string) string {
	if s == "" {
		return "0"
	}
	return s
}

func bigOf(t testing.TB, s string) *big.Int {
	v, ok := new(big.Int).SetString(z(s), 10)
	if !ok {
		t.Fatalf("bad number %q", s)
	}
	return v
}

// seedBudget creates a budget through the service, then writes the ledger
// fields directly (HSET) to reach the state under test, with remaining set so
// the invariant holds.
func (e *env) seedBudget(tenant, path string, st ledgerState) string {
	e.t.Helper()
	sp := scopeOf(tenant, path)
	e.createBudget(tenant, path, tokens, 0)
	rem := bigOf(e.t, st.allocated)
	for _, f := range []string{st.reserved, st.spent, st.debt} {
		rem.Sub(rem, bigOf(e.t, f))
	}
	ledgertest.PatchBalance(e.t, e.rdb, keys.Tenant(tenant).Budget(sp, "TOKENS"), map[string]string{
		"allocated": z(st.allocated), "remaining": rem.String(), "reserved": z(st.reserved), "spent": z(st.spent),
		"debt": z(st.debt), "overdraft_limit": z(st.limit), "is_over_limit": strconv.FormatBool(st.over)})
	e.checkInvariant(tenant, sp, "TOKENS")
	return sp
}

func fund(tenant, sp string, op cyclesv1.FundingOperation, amount int64, key string) *cyclesv1.FundBudgetRequest {
	return &cyclesv1.FundBudgetRequest{TenantId: tenant, ScopePath: sp, Unit: tokens, Operation: op, Amount: amount, IdempotencyKey: key, Reason: "test"}
}

func mustInt(t testing.TB, s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestFundingArithmeticOnEveryBackend(t *testing.T) {
	maxI := mustInt(t, max)
	p53I := mustInt(t, p53)
	type want struct{ allocated, remaining, spent, debt string }
	// inUse is a budget with some of everything: reserved, spent, debt
	// and an overdraft limit.
	inUse := ledgerState{allocated: "1000", reserved: "100", spent: "200", debt: "50", limit: "100"}
	cases := []struct {
		name   string
		seed   ledgerState
		op     cyclesv1.FundingOperation
		amount int64
		spent  *int64
		want   want
		over   bool
		events []string
	}{
		{"credit keeps spent reserved debt", inUse, credit, 500, nil,
			want{"1500", "1150", "200", "50"}, false, []string{"budget.funded"}},
		{"debit", inUse, debit, 300, nil,
			want{"700", "350", "200", "50"}, false, []string{"budget.debited"}},
		{"debit all of remaining", inUse, debit, 650, nil,
			want{"350", "0", "200", "50"}, false, []string{"budget.debited"}},
		{"reset", inUse, reset, 2000, nil,
			want{"2000", "1650", "200", "50"}, false, []string{"budget.reset"}},
		{"reset below usage goes negative", inUse, reset, 100, nil,
			want{"100", "-250", "200", "50"}, false, []string{"budget.reset"}},
		{"reset_spent with override", inUse, resetSpent, 1000, i64(10),
			want{"1000", "840", "10", "50"}, false, []string{"budget.reset_spent"}},
		{"reset_spent defaults spent to 0", inUse, resetSpent, 1000, nil,
			want{"1000", "850", "0", "50"}, false, []string{"budget.reset_spent"}},
		{"repay part of the debt", inUse, repayDebt, 30, nil,
			want{"1000", "680", "200", "20"}, false, []string{"budget.debt_repaid"}},
		{"repay with excess credits allocated", inUse, repayDebt, 80, nil,
			want{"1030", "730", "200", "0"}, false, []string{"budget.debt_repaid"}},
		{"repay without debt is a credit", ledgerState{allocated: "10"}, repayDebt, 5, nil,
			want{"15", "15", "0", "0"}, false, []string{"budget.debt_repaid"}},
		{"repay below the limit clears is_over_limit", ledgerState{allocated: "1000", debt: "100", limit: "50", over: true}, repayDebt, 60, nil,
			want{"1000", "960", "0", "40"}, false, []string{"budget.debt_repaid", "budget.over_limit_exited"}},
		{"repay to exactly the limit clears it", ledgerState{allocated: "1000", debt: "100", limit: "50", over: true}, repayDebt, 50, nil,
			want{"1000", "950", "0", "50"}, false, []string{"budget.debt_repaid", "budget.over_limit_exited"}},
		{"partial repay stays over", ledgerState{allocated: "1000", debt: "100", limit: "50", over: true}, repayDebt, 10, nil,
			want{"1000", "910", "0", "90"}, true, []string{"budget.debt_repaid"}},
		{"credit clears a stale flag without debt", ledgerState{allocated: "5", over: true}, credit, 1, nil,
			want{"6", "6", "0", "0"}, false, []string{"budget.funded", "budget.over_limit_exited"}},
		{"reset sets the flag when debt exceeds the limit", ledgerState{allocated: "5", debt: "7", limit: "3"}, reset, 5, nil,
			want{"5", "-2", "0", "7"}, true, []string{"budget.reset", "budget.over_limit_entered"}},
		// Exactness beyond 2^53 and at 2^63-1.
		{"credit 2^53+1 onto 2^53+1", ledgerState{allocated: p53}, credit, p53I, nil,
			want{"18014398509481986", "18014398509481986", "0", "0"}, false, []string{"budget.funded"}},
		{"credit up to 2^63-1", ledgerState{allocated: "9223372036854775806", reserved: p53}, credit, 1, nil,
			want{max, "9214364837600034814", "0", "0"}, false, []string{"budget.funded"}},
		{"debit 2^63-1", ledgerState{allocated: max}, debit, maxI, nil,
			want{"0", "0", "0", "0"}, false, []string{"budget.debited"}},
		{"reset to 2^63-1", ledgerState{allocated: "1"}, reset, maxI, nil,
			want{max, max, "0", "0"}, false, []string{"budget.reset"}},
		{"reset 0 under 2^63-1 reserved", ledgerState{allocated: max, reserved: max}, reset, 0, nil,
			want{"0", "-9223372036854775807", "0", "0"}, false, []string{"budget.reset"}},
		{"reset reaching int64 min exactly", ledgerState{allocated: max, reserved: max, spent: "1"}, reset, 0, nil,
			want{"0", "-9223372036854775808", "1", "0"}, false, []string{"budget.reset"}},
		{"reset_spent with 2^63-1 spent", ledgerState{allocated: "5", reserved: "1"}, resetSpent, 0, &maxI,
			want{"0", "-9223372036854775808", max, "0"}, false, []string{"budget.reset_spent"}},
		{"repay 2^63-1 against 2^53+1 debt", ledgerState{allocated: p53, debt: p53, limit: p53}, repayDebt, maxI, nil,
			want{max, max, "0", "0"}, false, []string{"budget.debt_repaid"}},
	}
	for _, be := range redistest.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			e := newEnvFor(t, be)
			id := e.createTenant()
			for i, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					sp := e.seedBudget(id, fmt.Sprintf("agent:c%d", i), tc.seed)
					before := e.budgetHash(id, sp, "TOKENS")
					nEv := len(e.events(id))
					req := fund(id, sp, tc.op, tc.amount, fmt.Sprintf("k-%d", i))
					req.Spent = tc.spent
					resp := mustCall(t, e.ctx, req, e.svc.FundBudget)

					h := e.budgetHash(id, sp, "TOKENS")
					got := want{h["allocated"], h["remaining"], h["spent"], h["debt"]}
					if got != tc.want {
						t.Fatalf("ledger = %+v, want %+v", got, tc.want)
					}
					if h["is_over_limit"] != strconv.FormatBool(tc.over) || h["reserved"] != before["reserved"] {
						t.Fatalf("is_over_limit = %s reserved = %s (before %s)", h["is_over_limit"], h["reserved"], before["reserved"])
					}
					e.checkInvariant(id, sp, "TOKENS")

					wantResp := &cyclesv1.FundBudgetResponse{
						Operation:         tc.op,
						PreviousAllocated: mustInt(t, before["allocated"]), NewAllocated: mustInt(t, tc.want.allocated),
						PreviousRemaining: mustInt(t, before["remaining"]), NewRemaining: mustInt(t, tc.want.remaining),
						PreviousDebt: mustInt(t, before["debt"]), NewDebt: mustInt(t, tc.want.debt),
						PreviousSpent: mustInt(t, before["spent"]), NewSpent: mustInt(t, tc.want.spent),
						TimestampMs: resp.GetTimestampMs(), Budget: resp.GetBudget(),
					}
					if !proto.Equal(resp, wantResp) {
						t.Fatalf("response = %v\nwant       %v", resp, wantResp)
					}
					b := resp.GetBudget()
					if b.GetAllocated() != mustInt(t, tc.want.allocated) || b.GetRemaining() != mustInt(t, tc.want.remaining) ||
						b.GetIsOverLimit() != tc.over || b.GetUpdatedAtMs() != resp.GetTimestampMs() {
						t.Fatalf("response budget = %v", b)
					}

					evs := e.events(id)[nEv:]
					if !reflect.DeepEqual(eventTypes(evs), tc.events) {
						t.Fatalf("events = %v, want %v", eventTypes(evs), tc.events)
					}
					d := evs[0].Data
					prev, next := d["previous_state"].(map[string]any), d["new_state"].(map[string]any)
					opName := tc.op.String()[len("FUNDING_OPERATION_"):]
					if d["operation"] != opName || d["scope"] != sp || d["unit"] != "TOKENS" || d["reason"] != "test" ||
						d["ledger_id"] != sp+"|TOKENS" || d["spent_override_provided"] != (tc.spent != nil) ||
						prev["allocated"] != before["allocated"] || prev["remaining"] != before["remaining"] ||
						next["allocated"] != tc.want.allocated || next["remaining"] != tc.want.remaining ||
						next["debt"] != tc.want.debt || next["spent"] != tc.want.spent || next["status"] != "ACTIVE" {
						t.Fatalf("event data = %v", d)
					}
				})
			}
			for _, op := range []string{"CREDIT", "DEBIT", "RESET", "RESET_SPENT", "REPAY_DEBT"} {
				if e.metrics.Sum(t, "cycles.admin.budgets.funded", attribute.String("operation", op)) == 0 {
					t.Fatalf("budgets.funded{%s} did not move", op)
				}
			}
		})
	}
}

func TestFundingRefusalsWriteNothing(t *testing.T) {
	maxI := mustInt(t, max)
	for _, be := range redistest.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			e := newEnvFor(t, be)
			id := e.createTenant()
			n := 0
			seed := func(st ledgerState) string {
				n++
				return e.seedBudget(id, fmt.Sprintf("agent:r%d", n), st)
			}
			frozen := seed(ledgerState{allocated: "10"})
			mustCall(t, e.ctx, &cyclesv1.FreezeBudgetRequest{TenantId: id, ScopePath: frozen, Unit: tokens}, e.svc.FreezeBudget)
			closed := seed(ledgerState{allocated: "10"})
			mustCall(t, e.ctx, &cyclesv1.CloseBudgetRequest{TenantId: id, ScopePath: closed, Unit: tokens}, e.svc.CloseBudget)
			normal := seed(ledgerState{allocated: "100", reserved: "30", spent: "20"})

			cases := []struct {
				name   string
				req    *cyclesv1.FundBudgetRequest
				code   codes.Code
				reason apierr.Code
				detail map[string]string
			}{
				{"credit overflows allocated", fund(id, seed(ledgerState{allocated: max}), credit, 1, "o1"), codes.InvalidArgument, apierr.Overflow, map[string]string{"field": "allocated"}},
				{"credit 2^63-1 onto 2^53+1", fund(id, seed(ledgerState{allocated: p53}), credit, maxI, "o2"), codes.InvalidArgument, apierr.Overflow, nil},
				{"reset below int64 min", fund(id, seed(ledgerState{allocated: max, reserved: max, spent: "2"}), reset, 0, "o3"), codes.InvalidArgument, apierr.Overflow, map[string]string{"field": "remaining"}},
				{"repay overflows remaining", fund(id, seed(ledgerState{allocated: "1"}), repayDebt, maxI, "o4"), codes.InvalidArgument, apierr.Overflow, nil},
				{"debit beyond remaining", fund(id, normal, debit, 51, "d1"), codes.FailedPrecondition, apierr.BudgetExceeded, map[string]string{"remaining": "50", "requested": "51"}},
				{"frozen", fund(id, frozen, credit, 1, "f1"), codes.FailedPrecondition, apierr.BudgetFrozen, nil},
				{"closed", fund(id, closed, credit, 1, "c1"), codes.FailedPrecondition, apierr.BudgetClosed, nil},
				{"unknown budget", fund(id, scopeOf(id, "agent:none"), credit, 1, "u1"), codes.NotFound, apierr.BudgetNotFound, nil},
				{"unspecified operation", fund(id, normal, 0, 1, "v1"), codes.InvalidArgument, apierr.InvalidRequest, map[string]string{"field": "operation"}},
				{"unknown operation", fund(id, normal, 17, 1, "v2"), codes.InvalidArgument, apierr.InvalidRequest, map[string]string{"field": "operation"}},
				{"negative amount", fund(id, normal, credit, -1, "v3"), codes.InvalidArgument, apierr.InvalidRequest, map[string]string{"field": "amount"}},
				{"spent with credit", func() *cyclesv1.FundBudgetRequest {
					r := fund(id, normal, credit, 1, "v4")
					r.Spent = i64(1)
					return r
				}(), codes.InvalidArgument, apierr.InvalidRequest, map[string]string{"field": "spent"}},
				{"negative spent", func() *cyclesv1.FundBudgetRequest {
					r := fund(id, normal, resetSpent, 1, "v5")
					r.Spent = i64(-1)
					return r
				}(), codes.InvalidArgument, apierr.InvalidRequest, map[string]string{"field": "spent"}},
				{"no idempotency key", fund(id, normal, credit, 1, ""), codes.InvalidArgument, apierr.InvalidRequest, map[string]string{"field": "idempotency_key"}},
				{"bad idempotency key", fund(id, normal, credit, 1, "a b"), codes.InvalidArgument, apierr.InvalidRequest, map[string]string{"field": "idempotency_key"}},
				{"no unit", func() *cyclesv1.FundBudgetRequest { r := fund(id, normal, credit, 1, "v6"); r.Unit = 0; return r }(), codes.InvalidArgument, apierr.InvalidRequest, map[string]string{"field": "unit"}},
				{"scope of another tenant", fund(id, "tenant:someone-else", credit, 1, "v7"), codes.InvalidArgument, apierr.InvalidRequest, map[string]string{"field": "scope_path"}},
			}
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					ae := refusedUnchanged(e, t, id, tc.req, e.svc.FundBudget, tc.code, tc.reason)
					for k, v := range tc.detail {
						if ae.Details[k] != v {
							t.Fatalf("detail %s = %q, want %q (%v)", k, ae.Details[k], v, ae.Details)
						}
					}
				})
			}
			// A closed tenant refuses funding too.
			mustCall(t, e.ctx, &cyclesv1.CloseTenantRequest{TenantId: id}, e.svc.CloseTenant)
			refusedUnchanged(e, t, id, fund(id, normal, credit, 1, "t1"), e.svc.FundBudget, codes.FailedPrecondition, apierr.TenantClosed)
		})
	}
}

func TestFundingIdempotency(t *testing.T) {
	e := newEnv(t)
	id := e.createTenant()
	sp := e.seedBudget(id, "agent:idem", ledgerState{allocated: "100"})
	other := e.seedBudget(id, "agent:other", ledgerState{allocated: "100"})

	first := mustCall(t, e.ctx, fund(id, sp, credit, 40, "pay-1"), e.svc.FundBudget)
	if first.GetNewAllocated() != 140 {
		t.Fatalf("first = %v", first)
	}
	rec := keys.Tenant(id).Idempotency("fund", "pay-1")
	ttl := e.rdb.PTTL(context.Background(), rec).Val()
	if ttl <= 0 || ttl > FundingReplayWindow {
		t.Fatalf("idempotency record TTL = %v, want (0, 24h]", ttl)
	}
	snap := e.snapshot(id)

	// Same key, same request (scope spelled differently): the original response, verbatim.
	replay := fund(id, scopeOf(id, "agent:IDEM"), credit, 40, "pay-1")
	again := mustCall(t, e.ctx, replay, e.svc.FundBudget)
	if !proto.Equal(again, first) {
		t.Fatalf("replay = %v\nfirst  = %v", again, first)
	}
	det := proto.MarshalOptions{Deterministic: true}
	a, _ := det.Marshal(first)
	b, _ := det.Marshal(again)
	if string(a) != string(b) {
		t.Fatal("replay is not byte-identical")
	}
	e.unchanged(id, snap) // no write, no event
	if n := e.metrics.Sum(t, "cycles.admin.funding.replays"); n != 1 {
		t.Fatalf("funding.replays = %d", n)
	}
	if n := e.metrics.Sum(t, "cycles.admin.budgets.funded"); n != 1 {
		t.Fatalf("budgets.funded = %d", n)
	}

	// Same key, different request: refused, nothing written.
	for name, req := range map[string]*cyclesv1.FundBudgetRequest{
		"other amount":    fund(id, sp, credit, 41, "pay-1"),
		"other operation": fund(id, sp, debit, 40, "pay-1"),
		"other budget":    fund(id, other, credit, 40, "pay-1"),
		"other reason":    func() *cyclesv1.FundBudgetRequest { r := fund(id, sp, credit, 40, "pay-1"); r.Reason = "x"; return r }(),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := call(e.ctx, req, e.svc.FundBudget)
			wantRefused(t, err, codes.AlreadyExists, apierr.IdempotencyMismatch)
			e.unchanged(id, snap)
		})
	}

	// A replay beats later state: after a freeze the original success is returned.
	mustCall(t, e.ctx, &cyclesv1.FreezeBudgetRequest{TenantId: id, ScopePath: sp, Unit: tokens}, e.svc.FreezeBudget)
	if got := mustCall(t, e.ctx, fund(id, sp, credit, 40, "pay-1"), e.svc.FundBudget); !proto.Equal(got, first) {
		t.Fatalf("replay after freeze = %v", got)
	}
	mustCall(t, e.ctx, &cyclesv1.UnfreezeBudgetRequest{TenantId: id, ScopePath: sp, Unit: tokens}, e.svc.UnfreezeBudget)

	// Failures are not remembered: the same key is evaluated fresh on retry.
	_, err := call(e.ctx, fund(id, sp, debit, 500, "pay-2"), e.svc.FundBudget)
	wantRefused(t, err, codes.FailedPrecondition, apierr.BudgetExceeded)
	mustCall(t, e.ctx, fund(id, sp, credit, 1000, "pay-3"), e.svc.FundBudget)
	if got := mustCall(t, e.ctx, fund(id, sp, debit, 500, "pay-2"), e.svc.FundBudget); got.GetNewAllocated() != 640 {
		t.Fatalf("retry after failure = %v", got)
	}
	e.checkInvariant(id, sp, "TOKENS")
}

// The scripts take their time from Redis TIME only: a trailing client time
// ARGV is ignored.
func TestScriptsIgnoreClientTime(t *testing.T) {
	for _, be := range redistest.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			e := newEnvFor(t, be)
			ctx := context.Background()
			id := newTenantID(t)
			tk := keys.Tenant(id)
			start := be.Client.Time(ctx).Val().UnixMilli()
			var rec record
			const bogus = "1000"
			if err := e.svc.exec.RunInto(ctx, &rec, scriptCreateTenant.Def, []string{tk.Record(), tk.Events()},
				id, "n", "REJECT", 60000, 0, 10, "{}", e.svc.eventContext(e.ctx), bogus); err != nil {
				t.Fatal(err)
			}
			end := be.Client.Time(ctx).Val().UnixMilli()
			created := mustInt(t, rec["created_at"])
			if created < start || created > end {
				t.Fatalf("created_at %d outside Redis TIME [%d, %d]", created, start, end)
			}
			sp := e.seedBudget(id, "", ledgerState{allocated: "1"})
			var out fundingResult
			if err := e.svc.exec.RunInto(ctx, &out, scriptFundBudget.Def,
				[]string{tk.Record(), tk.Budget(sp, "TOKENS"), tk.Idempotency("fund", "tm"), tk.Events()},
				"CREDIT", 1, "", "", "hash", 60000, sp, "TOKENS", e.svc.eventContext(e.ctx), bogus); err != nil {
				t.Fatal(err)
			}
			if ts := mustInt(t, out.Resp.TimestampMs); ts < start || ts > be.Client.Time(ctx).Val().UnixMilli()+1 {
				t.Fatalf("timestamp_ms %d is not Redis TIME (started %d)", ts, start)
			}
		})
	}
}
