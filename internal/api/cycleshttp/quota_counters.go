package cycleshttp

import (
	"net/http"

	"google.golang.org/protobuf/reflect/protoreflect"

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

func (a *API) quotaCounterRoutes() []endpoint {
	qc, offQC := a.qc, off("the quota counter service is not enabled on this server")
	return []endpoint{
		on(a, "GET /v1/admin/action-quota-counters", cyclesv1.QuotaCounterService_ListActionQuotaCounters_FullMethodName,
			via(qc, cyclesv1.QuotaCounterServiceServer.ListActionQuotaCounters), keyTenant,
			shaped[*cyclesv1.ListActionQuotaCountersResponse](page("counters", item(quotaStateOf))), offQC,
			query(q("tenant_id"), q("scope"), q("action_kind"), q("cursor"), q("run_id"), q("include_zero"),
				q("window").with(func(name, s string) (protoreflect.Value, error) {
					w, err := windowOf(name, s)
					return protoreflect.ValueOfEnum(w.Number()), err
				}), q("limit"))),
		on(a, "POST /v1/admin/action-quota-counters/reset", cyclesv1.QuotaCounterService_ResetActionQuotaCounter_FullMethodName,
			via(qc, cyclesv1.QuotaCounterServiceServer.ResetActionQuotaCounter), jsonBody((*quotaResetIn).fill),
			shaped[*cyclesv1.ResetActionQuotaCounterResponse](shapeOf("counter", "previous_used").with("counter", item(quotaStateOf))), offQC),
	}
}

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

type quotaResetIn struct {
	TenantID   string `json:"tenant_id"`
	Scope      string `json:"scope"`
	ActionKind string `json:"action_kind"`
	RiskClass  string `json:"risk_class"`
	Window     string `json:"window"`
	WindowKey  string `json:"window_key"`
	Reason     string `json:"reason"`
}

func (in *quotaResetIn) fill(out *cyclesv1.ResetActionQuotaCounterRequest) error {
	out.TenantId, out.Scope, out.ActionKind, out.WindowKey, out.Reason = in.TenantID, in.Scope, in.ActionKind, in.WindowKey, in.Reason
	if in.RiskClass != "" {
		rc, ok := actionkind.ParseRisk(in.RiskClass)
		if !ok {
			return apierr.Invalid("risk_class", "unknown risk class %q", in.RiskClass)
		}
		out.RiskClass = rc.Proto()
	}
	if in.Window != "" {
		wd, err := windowOf("window", in.Window)
		if err != nil {
			return err
		}
		out.Window = wd
	}
	return nil
}
