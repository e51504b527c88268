package admin

import (
	"context"
	"fmt"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/protobuf/proto"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/enumkey"
	"github.com/cyclesgo/cycles-go/internal/idempotency"
)

// FundBudget applies CREDIT, DEBIT, RESET, RESET_SPENT or REPAY_DEBT exactly
// (docs/protocol.md#budgets-and-funding-admin) in one script, idempotently by key for FundingReplayWindow:
// the same key with the same request returns the stored response verbatim
// (even if the budget was frozen since), a different request under the same
// key is IDEMPOTENCY_MISMATCH. Refused on FROZEN (BUDGET_FROZEN) and CLOSED
// (BUDGET_CLOSED) budgets, a DEBIT beyond remaining is BUDGET_EXCEEDED, and any
// result outside int64 is AMOUNT_OVERFLOW; a refusal writes nothing.
func (s *Service) FundBudget(ctx context.Context, req *cyclesv1.FundBudgetRequest) (*cyclesv1.FundBudgetResponse, error) {
	if err := ownTenant(ctx, &req.TenantId); err != nil {
		return nil, err
	}
	resp, replay, err := s.fundBudget(ctx, req)
	if err != nil {
		return nil, err
	}
	if replay {
		s.m.fundingReplays.Add(ctx, 1)
	} else {
		s.m.funded.Add(ctx, 1, metric.WithAttributes(attribute.String("operation", enumkey.Of(req.GetOperation()))))
	}
	return resp, nil
}

// fundingPayloadHash is the payload hash (idempotency.PayloadHash) of the
// request with its scope path canonicalized, so "tenant:a/agent:Bot" and
// "tenant:a/agent:bot" are the same request.
func fundingPayloadHash(req *cyclesv1.FundBudgetRequest, canonicalScope string) (string, error) {
	c := proto.Clone(req).(*cyclesv1.FundBudgetRequest)
	c.ScopePath = canonicalScope
	return idempotency.PayloadHash(c)
}

// fundingState is a budget's balances before or after a funding call, as
// admin/fund_budget answers them. Reserved is part of the script's answer
// (and of its event) but not of FundBudgetResponse, which has no reserved.
type fundingState struct {
	Allocated string `json:"allocated"`
	Remaining string `json:"remaining"`
	Debt      string `json:"debt"`
	Spent     string `json:"spent"`
	Reserved  string `json:"reserved"`
}

type fundingResult struct {
	Replay bool `json:"replay"`
	Resp   struct {
		Operation   string       `json:"operation"`
		TimestampMs string       `json:"timestamp_ms"`
		Previous    fundingState `json:"previous"`
		New         fundingState `json:"new"`
		Budget      record       `json:"budget"`
	} `json:"resp"`
}

func (s *Service) fundBudget(ctx context.Context, req *cyclesv1.FundBudgetRequest) (*cyclesv1.FundBudgetResponse, bool, error) {
	ref, err := resolveBudget(req.GetTenantId(), req.GetScopePath(), req.GetUnit())
	if err != nil {
		return nil, false, err
	}
	op := enumkey.Of(req.GetOperation())
	if op == "" {
		return nil, false, apierr.Invalid("operation", "must be one of CREDIT, DEBIT, RESET, RESET_SPENT, REPAY_DEBT")
	}
	hash, err := fundingPayloadHash(req, ref.scope)
	if err != nil {
		return nil, false, fmt.Errorf("hash funding request: %w", err)
	}
	spent := ""
	if req.Spent != nil {
		spent = strconv.FormatInt(req.GetSpent(), 10)
	}
	var out fundingResult
	err = scriptFundBudget.RunInto(ctx, s.exec, &out,
		fundKeys{ref.keys.Record(), ref.key(), ref.keys.Idempotency("fund", req.GetIdempotencyKey()), ref.keys.Events()},
		fundArgs{op, req.GetAmount(), spent, req.GetReason(), hash, FundingReplayWindow.Milliseconds(),
			ref.scope, ref.unit, s.eventContext(ctx)})
	if err != nil {
		return nil, false, err
	}
	resp, err := fundingResponse(ref, &out)
	return resp, out.Replay, err
}

// fundingResponse builds the response from the script's snapshot only, so a
// replay (same bytes) yields an identical message.
func fundingResponse(ref budgetRef, out *fundingResult) (*cyclesv1.FundBudgetResponse, error) {
	r := &out.Resp
	var perr error
	num := func(field, v string) int64 {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil && perr == nil {
			perr = apierr.New(apierr.InternalError, "funding result has a malformed %s %q", field, v)
		}
		return n
	}
	op, ok := cyclesv1.FundingOperation_value["FUNDING_OPERATION_"+r.Operation]
	if !ok {
		return nil, apierr.New(apierr.InternalError, "funding result has a malformed operation %q", r.Operation)
	}
	resp := &cyclesv1.FundBudgetResponse{
		Operation:         cyclesv1.FundingOperation(op),
		PreviousAllocated: num("previous.allocated", r.Previous.Allocated),
		NewAllocated:      num("new.allocated", r.New.Allocated),
		PreviousRemaining: num("previous.remaining", r.Previous.Remaining),
		NewRemaining:      num("new.remaining", r.New.Remaining),
		PreviousDebt:      num("previous.debt", r.Previous.Debt),
		NewDebt:           num("new.debt", r.New.Debt),
		PreviousSpent:     num("previous.spent", r.Previous.Spent),
		NewSpent:          num("new.spent", r.New.Spent),
		TimestampMs:       num("timestamp_ms", r.TimestampMs),
	}
	if perr != nil {
		return nil, perr
	}
	b, err := budgetFromRecord(ref.tenant, r.Budget.withIdentity(ref.scope, ref.unit))
	if err != nil {
		return nil, err
	}
	resp.Budget = b
	return resp, nil
}
