package policy

import (
	"context"
	"strconv"
	"strings"
	"time"

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

// countersPage is policy/counters' reply.
type countersPage struct {
	Items script.LuaArray[counterRow] `json:"items"`
	Next  string                      `json:"next"`
	More  bool                        `json:"more"`
}

// resetReply is policy/counter_reset's reply: the counter after the reset
// and its count before.
type resetReply struct {
	State    counterRow `json:"state"`
	Previous string     `json:"previous"`
}

// ListActionQuotaCounters pages a tenant's live counters in expiry order.
// The cursor is an offset into the live counters: counters that expire
// between pages shift it (an operator's debug view, not a ledger).
func (s *Service) ListActionQuotaCounters(ctx context.Context, req *cyclesv1.ListActionQuotaCountersRequest) (*cyclesv1.ListActionQuotaCountersResponse, error) {
	off := "0"
	if c := req.GetCursor(); c != "" {
		if !validCursor(c) {
			return nil, apierr.Invalid("cursor", "is not a cursor this server issued")
		}
		off = c
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
	var out countersPage
	t := keys.Tenant(tenant)
	if err := scriptCounters.RunInto(ctx, s.exec, &out, countersKeys{t.Record(), t.QuotaCounters()},
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

// validCursor: a listing cursor is "<offset>" or "<offset>:<fields walked>"
// (lua/policy/counters.lua), decimal, each at most 15 digits.
func validCursor(c string) bool {
	a, b, two := strings.Cut(c, ":")
	digits := func(s string) bool {
		if s == "" || len(s) > 15 {
			return false
		}
		for i := 0; i < len(s); i++ {
			if s[i] < '0' || s[i] > '9' {
				return false
			}
		}
		return true
	}
	return digits(a) && (!two || digits(b))
}

// counterKey is where a counter lives: a per_run counter's own hash, or
// the day hash holding a calendar counter with its field and window
// instance (lua/lib/quota.lua). ok is false when windowKey cannot name a
// window instance of window (no such counter).
func counterKey(t keys.Tenant, scope, counted string, window cyclesv1.ActionQuotaWindow, windowKey string) (key, field, bucket string, ok bool) {
	name := actionkind.WindowName(window)
	if window == cyclesv1.ActionQuotaWindow_ACTION_QUOTA_WINDOW_PER_RUN {
		return t.QuotaCounter(scope, counted, name, windowKey), "", "", true
	}
	var layout, code string
	var length int64
	switch window {
	case cyclesv1.ActionQuotaWindow_ACTION_QUOTA_WINDOW_PER_MINUTE_TUMBLING:
		layout, code, length = "2006-01-02T15:04", "m", 60_000
	case cyclesv1.ActionQuotaWindow_ACTION_QUOTA_WINDOW_PER_HOUR_TUMBLING:
		layout, code, length = "2006-01-02T15", "h", 3_600_000
	case cyclesv1.ActionQuotaWindow_ACTION_QUOTA_WINDOW_PER_DAY_TUMBLING:
		layout, code, length = "2006-01-02", "d", 86_400_000
	case cyclesv1.ActionQuotaWindow_ACTION_QUOTA_WINDOW_PER_TENANT_PER_DAY:
		layout, code, length = "2006-01-02", "t", 86_400_000
	default:
		return "", "", "", false
	}
	at, err := time.ParseInLocation(layout, windowKey, time.UTC)
	if err != nil || at.Format(layout) != windowKey || at.UnixMilli() < 0 {
		return "", "", "", false
	}
	ms := at.UnixMilli()
	return t.QuotaDay(strconv.FormatInt(ms/86_400_000, 10)), scope + "|" + counted + "|" + code,
		strconv.FormatInt(ms/length, 10), true
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
	var out resetReply
	key, field, bucket, ok := counterKey(t, req.GetScope(), counted, req.GetWindow(), req.GetWindowKey())
	if !ok {
		// No window instance: the script refuses it as it refuses any counter
		// that does not exist (after its tenant check).
		key, field, bucket = t.QuotaDay("none"), "-", "-"
	}
	ks := counterResetKeys{t.Record(), key, t.QuotaCounters(), t.Events(), t.Audit()}
	if err := scriptCounterReset.RunInto(ctx, s.exec, &out, ks, counterResetArgs{eventctx.Arg(ctx, 0), req.GetReason(), req.GetTenantId(),
		field, bucket}); err != nil {
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
