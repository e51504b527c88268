package cycleshttp

import (
	"context"
	"net/http"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/actionkind"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
)

// The v0.1.26 action-quota counters over QuotaCounterService: GET (the
// admin key, or a tenant key with action_quotas:read or the deprecated
// balances:read, on its own tenant) and POST (admin key only):
// GET /v1/admin/action-quota-counters (tenant_id required; scope,
// action_kind, window, run_id, include_zero, limit, cursor) and POST
// /v1/admin/action-quota-counters/reset (ActionQuotaCounterResetRequest).

func (a *API) quotaCounterRoutes() {
	a.mux.HandleFunc("GET /v1/admin/action-quota-counters", a.listQuotaCounters)
	a.mux.HandleFunc("POST /v1/admin/action-quota-counters/reset", a.resetQuotaCounter)
}

func (a *API) quotaCounterCall(w http.ResponseWriter, r *http.Request, method string, req any, decodeErr error,
	call func(ctx context.Context, req any) (any, error), render func(resp any) any) {
	if a.qc == nil {
		a.notServed(w, r, "the quota counter service is not enabled on this server")
		return
	}
	a.serve(w, r, route{method, adminPlane, http.StatusOK}, req, decodeErr, call, render)
}

type quotaStateOut struct {
	ActionKind        string `json:"action_kind"`
	RiskClass         string `json:"risk_class,omitempty"`
	Scope             string `json:"scope"`
	ScopePath         string `json:"scope_path"`
	Window            string `json:"window"`
	WindowKey         string `json:"window_key"`
	Used              int64  `json:"used"`
	Limit             int64  `json:"limit"`
	Remaining         int64  `json:"remaining"`
	PolicyID          string `json:"policy_id,omitempty"`
	ExpiresAt         string `json:"expires_at,omitempty"`
	LastIncrementedAt string `json:"last_incremented_at,omitempty"`
}

func quotaStateOf(s *cyclesv1.ActionQuotaState) *quotaStateOut {
	return &quotaStateOut{ActionKind: s.GetActionKind(), RiskClass: string(actionkind.RiskOf(s.GetRiskClass())), Scope: s.GetScope(),
		ScopePath: s.GetScope(), Window: actionkind.WindowName(s.GetWindow()), WindowKey: s.GetWindowKey(), Used: s.GetUsed(),
		Limit: s.GetLimit(), Remaining: s.GetRemaining(), PolicyID: s.GetPolicyId(), ExpiresAt: isoTime(s.GetExpiresAtMs()),
		LastIncrementedAt: isoTime(s.GetLastIncrementedAtMs())}
}

type quotaCountersOut struct {
	Counters   []*quotaStateOut `json:"counters"`
	NextCursor string           `json:"next_cursor,omitempty"`
	HasMore    bool             `json:"has_more"`
}

func (a *API) listQuotaCounters(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	req := &cyclesv1.ListActionQuotaCountersRequest{TenantId: q.Get("tenant_id"), Scope: q.Get("scope"),
		ActionKind: q.Get("action_kind"), Cursor: q.Get("cursor"), RunId: q.Get("run_id")}
	var err error
	if s := q.Get("include_zero"); s != "" {
		switch s {
		case "true":
			req.IncludeZero = true
		case "false":
		default:
			err = apierr.Invalid("include_zero", "must be true or false")
		}
	}
	if req.TenantId == "" {
		// A tenant key lists its own tenant's counters (the key names it; the
		// chain proves the key and the service confines it to that tenant).
		if k, ok := auth.ParseAPIKey(r.Header.Get("X-Cycles-API-Key")); ok {
			req.TenantId = k.Tenant
		} else {
			err = apierr.Invalid("tenant_id", "is required with the admin key")
		}
	}
	if s := q.Get("window"); s != "" && err == nil {
		req.Window, err = windowOf("window", s)
	}
	if err == nil {
		req.Limit, err = limitParam(q)
	}
	a.quotaCounterCall(w, r, cyclesv1.QuotaCounterService_ListActionQuotaCounters_FullMethodName, req, err,
		func(ctx context.Context, req any) (any, error) {
			return a.qc.ListActionQuotaCounters(ctx, req.(*cyclesv1.ListActionQuotaCountersRequest))
		},
		func(resp any) any {
			l := resp.(*cyclesv1.ListActionQuotaCountersResponse)
			out := &quotaCountersOut{Counters: make([]*quotaStateOut, 0, len(l.GetCounters())), NextCursor: l.GetNextCursor(), HasMore: l.GetHasMore()}
			for _, c := range l.GetCounters() {
				out.Counters = append(out.Counters, quotaStateOf(c))
			}
			return out
		})
}

type quotaResetIn struct {
	TenantID   string `json:"tenant_id"`
	Scope      string `json:"scope"`
	ActionKind string `json:"action_kind"`
	RiskClass  string `json:"risk_class"`
	Window     string `json:"window"`
	WindowKey  string `json:"window_key"`
	Reason     string `json:"reason"`
}

type quotaResetOut struct {
	Counter      *quotaStateOut `json:"counter"`
	PreviousUsed int64          `json:"previous_used"`
}

func (a *API) resetQuotaCounter(w http.ResponseWriter, r *http.Request) {
	var in quotaResetIn
	req, err := decodeInto(a, w, r, &in, func() (*cyclesv1.ResetActionQuotaCounterRequest, error) {
		out := &cyclesv1.ResetActionQuotaCounterRequest{TenantId: in.TenantID, Scope: in.Scope, ActionKind: in.ActionKind,
			WindowKey: in.WindowKey, Reason: in.Reason}
		if in.RiskClass != "" {
			rc, ok := actionkind.ParseRisk(in.RiskClass)
			if !ok {
				return nil, apierr.Invalid("risk_class", "unknown risk class %q", in.RiskClass)
			}
			out.RiskClass = rc.Proto()
		}
		if in.Window != "" {
			wd, err := windowOf("window", in.Window)
			if err != nil {
				return nil, err
			}
			out.Window = wd
		}
		return out, nil
	})
	a.quotaCounterCall(w, r, cyclesv1.QuotaCounterService_ResetActionQuotaCounter_FullMethodName, req, err,
		func(ctx context.Context, req any) (any, error) {
			return a.qc.ResetActionQuotaCounter(ctx, req.(*cyclesv1.ResetActionQuotaCounterRequest))
		},
		func(resp any) any {
			rr := resp.(*cyclesv1.ResetActionQuotaCounterResponse)
			return &quotaResetOut{Counter: quotaStateOf(rr.GetCounter()), PreviousUsed: rr.GetPreviousUsed()}
		})
}
