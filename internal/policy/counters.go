package policy

import (
	"context"
	"strconv"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/actionkind"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/defaults"
	"github.com/cyclesgo/cycles-go/internal/eventctx"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/script"
)

// The operator view of the v0.1.26 action-quota counters (QuotaCounterService,
// docs/protocol.md#v0126-action-governance): a page of a tenant's live
// counters, and the reset of one. The counters themselves are written by the
// reserve script (lua/lib/quota.lua).

// counterRow is a counter as the scripts answer it: scope, kind, risk class,
// window, window key, used, limit, policy id, expires at, last count.
type counterRow [10]string

func (r counterRow) proto() (*cyclesv1.ActionQuotaState, error) {
	n := make([]int64, 0, 4)
	for _, i := range []int{5, 6, 8, 9} {
		v, err := strconv.ParseInt(r[i], 10, 64)
		if err != nil {
			return nil, apierr.New(apierr.InternalError, "quota counter has a malformed field: %q", r[i])
		}
		n = append(n, v)
	}
	w, _ := actionkind.ParseWindow(r[3])
	return &cyclesv1.ActionQuotaState{Scope: r[0], ActionKind: r[1], RiskClass: actionkind.RiskClass(r[2]).Proto(), Window: w,
		WindowKey: r[4], Used: n[0], Limit: n[1], Remaining: max(0, n[1]-n[0]), PolicyId: r[7], ExpiresAtMs: n[2],
		LastIncrementedAtMs: n[3]}, nil
}

// ListActionQuotaCounters pages a tenant's live counters in expiry order.
// The cursor is an offset into the live counters: counters that expire
// between pages shift it (an operator's debug view, not a ledger).
func (s *Service) ListActionQuotaCounters(ctx context.Context, req *cyclesv1.ListActionQuotaCountersRequest) (*cyclesv1.ListActionQuotaCountersResponse, error) {
	off := int64(0)
	if c := req.GetCursor(); c != "" {
		v, err := strconv.ParseInt(c, 10, 64)
		if err != nil || v < 0 {
			return nil, apierr.Invalid("cursor", "is not a cursor this server issued")
		}
		off = v
	}
	limit := int(req.GetLimit())
	defaults.Set(&limit, DefaultListLimit)
	limit = min(limit, MaxListLimit)
	tenant, err := auth.OwnTenant(ctx, req.GetTenantId())
	if err != nil {
		return nil, err
	}
	if tenant == "" {
		return nil, apierr.Invalid("tenant_id", "is required with the admin key")
	}
	var out struct {
		Items script.LuaArray[counterRow] `json:"items"`
		Next  string                      `json:"next"`
		More  bool                        `json:"more"`
	}
	t := keys.Tenant(tenant)
	if err := run(ctx, s, &out, scriptCounters, countersKeys{t.Record(), t.QuotaCounters()},
		countersArgs{req.GetScope(), req.GetActionKind(), actionkind.WindowName(req.GetWindow()), off, limit,
			req.GetRunId(), boolArg(req.GetIncludeZero())}); err != nil {
		return nil, err
	}
	resp := &cyclesv1.ListActionQuotaCountersResponse{HasMore: out.More, Counters: []*cyclesv1.ActionQuotaState{}}
	if out.More {
		resp.NextCursor = out.Next
	}
	for _, r := range out.Items {
		st, err := r.proto()
		if err != nil {
			return nil, err
		}
		resp.Counters = append(resp.Counters, st)
	}
	return resp, nil
}

// boolArg is a script flag: "1" or "".
func boolArg(b bool) string {
	if b {
		return "1"
	}
	return ""
}

// ResetActionQuotaCounter sets one counter to 0, emits quota.counter_reset
// and appends the call's audit entry, all in one script run.
func (s *Service) ResetActionQuotaCounter(ctx context.Context, req *cyclesv1.ResetActionQuotaCounterRequest) (*cyclesv1.ResetActionQuotaCounterResponse, error) {
	counted := req.GetActionKind()
	if counted == actionkind.RiskCounter {
		counted += ":" + string(actionkind.RiskOf(req.GetRiskClass()))
	}
	t := keys.Tenant(req.GetTenantId())
	var out struct {
		State    counterRow `json:"state"`
		Previous string     `json:"previous"`
	}
	ks := counterResetKeys{t.Record(), t.QuotaCounter(req.GetScope(), counted, actionkind.WindowName(req.GetWindow()), req.GetWindowKey()),
		t.QuotaCounters(), t.Events(), t.Audit()}
	if err := run(ctx, s, &out, scriptCounterReset, ks, counterResetArgs{eventctx.Arg(ctx, 0), req.GetReason(), req.GetTenantId()}); err != nil {
		return nil, err
	}
	st, err := out.State.proto()
	if err != nil {
		return nil, err
	}
	prev, err := strconv.ParseInt(out.Previous, 10, 64)
	if err != nil {
		return nil, apierr.New(apierr.InternalError, "quota counter had a malformed count %q", out.Previous)
	}
	return &cyclesv1.ResetActionQuotaCounterResponse{Counter: st, PreviousUsed: prev}, nil
}
