package cycleshttp

import (
	"context"
	"net/http"
	"net/url"
	"time"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/actionkind"
	"github.com/cyclesgo/cycles-go/internal/api/authapi"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/scope"
	"github.com/cyclesgo/cycles-go/internal/server"
)

// The admin surface a Cycles quickstart needs, in the governance spec's
// shapes (cycles-governance-admin-v0.1.25), each route bound to its
// AdminService method and authenticated with the admin key (X-Admin-API-Key,
// or cyclesd's X-Cycles-Admin-Key). What is not served is listed in
// docs/http-api.md.

var (
	tenantStatusNames  = enumNames(cyclesv1.TenantStatus_name, "TENANT_STATUS_")
	tenantStatusValues = enumValues(tenantStatusNames)
	keyStatusNames     = enumNames(cyclesv1.ApiKeyStatus_name, "API_KEY_STATUS_")
	keyStatusValues    = enumValues(keyStatusNames)
	budgetStatusNames  = enumNames(cyclesv1.BudgetStatus_name, "BUDGET_STATUS_")
	fundingNames       = enumNames(cyclesv1.FundingOperation_name, "FUNDING_OPERATION_")
	fundingValues      = enumValues(fundingNames)
)

func isoTime(ms int64) string {
	if ms == 0 {
		return ""
	}
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z")
}

func (a *API) adminRoutes() {
	a.mux.HandleFunc("POST /v1/admin/tenants", a.createTenant)
	a.mux.HandleFunc("GET /v1/admin/tenants", a.listTenants)
	a.mux.HandleFunc("GET /v1/admin/tenants/{tenant_id}", a.getTenant)
	a.mux.HandleFunc("PATCH /v1/admin/tenants/{tenant_id}", a.updateTenant)
	a.mux.HandleFunc("POST /v1/admin/api-keys", a.createAPIKey)
	a.mux.HandleFunc("GET /v1/admin/api-keys", a.listAPIKeys)
	a.mux.HandleFunc("DELETE /v1/admin/api-keys/{key_id}", a.revokeAPIKey)
	a.mux.HandleFunc("POST /v1/admin/budgets", a.createBudget)
	a.mux.HandleFunc("GET /v1/admin/budgets", a.listBudgets)
	a.mux.HandleFunc("PATCH /v1/admin/budgets", a.updateBudget)
	a.mux.HandleFunc("GET /v1/admin/budgets/lookup", a.lookupBudget)
	a.mux.HandleFunc("POST /v1/admin/budgets/fund", a.fundBudget)
	a.mux.HandleFunc("POST /v1/admin/budgets/freeze", a.freezeBudget)
	a.mux.HandleFunc("POST /v1/admin/budgets/unfreeze", a.unfreezeBudget)
	a.mux.HandleFunc("POST /v1/admin/budgets/close", a.closeBudget)
}

// admin runs one AdminService call.
func (a *API) admin(w http.ResponseWriter, r *http.Request, method string, ok int, req any, decodeErr error,
	call func(ctx context.Context, req any) (any, error), render func(resp any) any) {
	if a.adm == nil {
		a.notServed(w, r, "the admin service is not enabled on this server")
		return
	}
	a.serve(w, r, route{method, adminPlane, ok}, req, decodeErr, call, render)
}

// ---- tenants ------------------------------------------------------------------

type tenantOut struct {
	TenantID                   string            `json:"tenant_id"`
	Name                       string            `json:"name"`
	Status                     string            `json:"status"`
	DefaultCommitOveragePolicy string            `json:"default_commit_overage_policy,omitempty"`
	DefaultReservationTTLMs    int64             `json:"default_reservation_ttl_ms,omitempty"`
	MaxReservationTTLMs        int64             `json:"max_reservation_ttl_ms,omitempty"`
	MaxReservationExtensions   int32             `json:"max_reservation_extensions"`
	Metadata                   map[string]string `json:"metadata,omitempty"`
	CreatedAt                  string            `json:"created_at"`
	UpdatedAt                  string            `json:"updated_at,omitempty"`
	ClosedAt                   string            `json:"closed_at,omitempty"`
	// ObserveMode is the v0.1.26 tenant observe mode, present only when it
	// is not ENFORCE: the v0.1.25 Tenant schema is closed, and its clients
	// (the dashboard, contract tests) must see no change until a tenant uses it.
	ObserveMode string `json:"observe_mode,omitempty"`
}

func tenantOf(t *cyclesv1.Tenant) *tenantOut {
	return &tenantOut{
		TenantID: t.GetTenantId(), Name: t.GetName(), Status: tenantStatusNames[int32(t.GetStatus())],
		DefaultCommitOveragePolicy: policyNames[int32(t.GetDefaultCommitOveragePolicy())],
		DefaultReservationTTLMs:    t.GetDefaultReservationTtlMs(), MaxReservationTTLMs: t.GetMaxReservationTtlMs(),
		MaxReservationExtensions: t.GetMaxReservationExtensions(), Metadata: t.GetMetadata(),
		CreatedAt: isoTime(t.GetCreatedAtMs()), UpdatedAt: isoTime(t.GetUpdatedAtMs()), ClosedAt: isoTime(t.GetClosedAtMs()),
		ObserveMode: observeModeOut(t.GetObserveMode()),
	}
}

type tenantIn struct {
	TenantID                   string            `json:"tenant_id"`
	Name                       *string           `json:"name"`
	ParentTenantID             string            `json:"parent_tenant_id"`
	Status                     *string           `json:"status"`
	Metadata                   map[string]string `json:"metadata"`
	DefaultCommitOveragePolicy *string           `json:"default_commit_overage_policy"`
	DefaultReservationTTLMs    *int64            `json:"default_reservation_ttl_ms"`
	MaxReservationTTLMs        *int64            `json:"max_reservation_ttl_ms"`
	MaxReservationExtensions   *int32            `json:"max_reservation_extensions"`
	ReservationExpiryPolicy    string            `json:"reservation_expiry_policy"`
	// ObserveMode (v0.1.26) is served by PATCH only.
	ObserveMode *string `json:"observe_mode"`
}

func (t *tenantIn) unsupported() error {
	if t.ParentTenantID != "" {
		return apierr.Invalid("parent_tenant_id", "tenant hierarchies are not supported by cyclesd")
	}
	if t.ReservationExpiryPolicy != "" && t.ReservationExpiryPolicy != "AUTO_RELEASE" {
		return apierr.Invalid("reservation_expiry_policy", "cyclesd always releases expired reservations (AUTO_RELEASE)")
	}
	return nil
}

func (a *API) createTenant(w http.ResponseWriter, r *http.Request) {
	var in tenantIn
	req, err := decodeInto(a, w, r, &in, func() (*cyclesv1.CreateTenantRequest, error) {
		if err := in.unsupported(); err != nil {
			return nil, err
		}
		if in.Status != nil {
			return nil, apierr.Invalid("status", "unknown field")
		}
		// A new tenant enforces (the spec's default); OBSERVE is set by PATCH.
		if in.ObserveMode != nil && *in.ObserveMode != "ENFORCE" && *in.ObserveMode != "DISABLED" {
			return nil, apierr.Invalid("observe_mode", "a new tenant enforces; set OBSERVE with PATCH /v1/admin/tenants/{tenant_id}")
		}
		pol, err := policyOf("default_commit_overage_policy", in.DefaultCommitOveragePolicy)
		if err != nil {
			return nil, err
		}
		name := ""
		if in.Name != nil {
			name = *in.Name
		}
		return &cyclesv1.CreateTenantRequest{TenantId: in.TenantID, Name: name, DefaultCommitOveragePolicy: pol,
			DefaultReservationTtlMs: in.DefaultReservationTTLMs, MaxReservationTtlMs: in.MaxReservationTTLMs,
			MaxReservationExtensions: in.MaxReservationExtensions, Metadata: in.Metadata}, nil
	})
	a.admin(w, r, cyclesv1.AdminService_CreateTenant_FullMethodName, http.StatusCreated, req, err,
		func(ctx context.Context, req any) (any, error) {
			return a.adm.CreateTenant(ctx, req.(*cyclesv1.CreateTenantRequest))
		},
		func(resp any) any { return tenantOf(resp.(*cyclesv1.CreateTenantResponse).GetTenant()) })
}

func (a *API) getTenant(w http.ResponseWriter, r *http.Request) {
	req := &cyclesv1.GetTenantRequest{TenantId: r.PathValue("tenant_id")}
	a.admin(w, r, cyclesv1.AdminService_GetTenant_FullMethodName, http.StatusOK, req, nil,
		func(ctx context.Context, req any) (any, error) {
			return a.adm.GetTenant(ctx, req.(*cyclesv1.GetTenantRequest))
		},
		func(resp any) any { return tenantOf(resp.(*cyclesv1.GetTenantResponse).GetTenant()) })
}

type tenantsOut struct {
	Tenants    []*tenantOut `json:"tenants"`
	NextCursor string       `json:"next_cursor,omitempty"`
	HasMore    bool         `json:"has_more"`
}

// listTenants serves GET /v1/admin/tenants over AdminService.ListTenants:
// status, search, limit and cursor are served; the order is always tenant_id
// ascending, so sort_by and sort_dir are ignored (the spec lets a server
// ignore them), as is observe_mode (a v0.1.26 extension). parent_tenant_id is
// refused: cyclesd has no tenant hierarchy.
func (a *API) listTenants(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	req := &cyclesv1.ListTenantsRequest{Search: q.Get("search"), Cursor: q.Get("cursor")}
	var err error
	if q.Get("parent_tenant_id") != "" {
		err = apierr.Invalid("parent_tenant_id", "tenant hierarchies are not supported by cyclesd")
	}
	if s := q.Get("status"); s != "" && err == nil {
		var v int32
		if v, err = parseEnum("status", s, tenantStatusValues); err == nil {
			req.Status = cyclesv1.TenantStatus(v)
		}
	}
	if err == nil {
		req.Limit, err = limitParam(q)
	}
	a.admin(w, r, cyclesv1.AdminService_ListTenants_FullMethodName, http.StatusOK, req, err,
		func(ctx context.Context, req any) (any, error) {
			return a.adm.ListTenants(ctx, req.(*cyclesv1.ListTenantsRequest))
		},
		func(resp any) any {
			l := resp.(*cyclesv1.ListTenantsResponse)
			out := &tenantsOut{Tenants: make([]*tenantOut, 0, len(l.GetTenants())), NextCursor: l.GetNextCursor(), HasMore: l.GetHasMore()}
			for _, t := range l.GetTenants() {
				out.Tenants = append(out.Tenants, tenantOf(t))
			}
			return out
		})
}

// updateTenant is PATCH: the given fields change; status CLOSED runs the
// close cascade (CloseTenant) and must come alone.
func (a *API) updateTenant(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("tenant_id")
	var in tenantIn
	closing := false
	req, err := decodeInto(a, w, r, &in, func() (any, error) {
		if err := in.unsupported(); err != nil {
			return nil, err
		}
		if in.TenantID != "" {
			return nil, apierr.Invalid("tenant_id", "unknown field")
		}
		up := &cyclesv1.UpdateTenantRequest{TenantId: id, Name: in.Name, DefaultReservationTtlMs: in.DefaultReservationTTLMs,
			MaxReservationTtlMs: in.MaxReservationTTLMs, MaxReservationExtensions: in.MaxReservationExtensions, Metadata: in.Metadata}
		pol, err := policyOf("default_commit_overage_policy", in.DefaultCommitOveragePolicy)
		if err != nil {
			return nil, err
		}
		up.DefaultCommitOveragePolicy = pol
		if in.ObserveMode != nil {
			m, ok := actionkind.ParseObserveMode(*in.ObserveMode)
			if !ok {
				return nil, apierr.Invalid("observe_mode", "must be DISABLED, OBSERVE or ENFORCE")
			}
			up.ObserveMode = m
		}
		if in.Status != nil {
			v, err := parseEnum("status", *in.Status, tenantStatusValues)
			if err != nil {
				return nil, err
			}
			if cyclesv1.TenantStatus(v) == cyclesv1.TenantStatus_TENANT_STATUS_CLOSED {
				if in.Name != nil || in.Metadata != nil || in.DefaultCommitOveragePolicy != nil || in.DefaultReservationTTLMs != nil ||
					in.MaxReservationTTLMs != nil || in.MaxReservationExtensions != nil || in.ObserveMode != nil {
					return nil, apierr.Invalid("status", "closing a tenant must be the only change in its request")
				}
				closing = true
				return &cyclesv1.CloseTenantRequest{TenantId: id}, nil
			}
			up.Status = cyclesv1.TenantStatus(v)
		}
		return up, nil
	})
	if closing {
		a.admin(w, r, cyclesv1.AdminService_CloseTenant_FullMethodName, http.StatusOK, req, err,
			func(ctx context.Context, req any) (any, error) {
				return a.adm.CloseTenant(ctx, req.(*cyclesv1.CloseTenantRequest))
			},
			func(resp any) any { return tenantOf(resp.(*cyclesv1.CloseTenantResponse).GetTenant()) })
		return
	}
	a.admin(w, r, cyclesv1.AdminService_UpdateTenant_FullMethodName, http.StatusOK, req, err,
		func(ctx context.Context, req any) (any, error) {
			return a.adm.UpdateTenant(ctx, req.(*cyclesv1.UpdateTenantRequest))
		},
		func(resp any) any { return tenantOf(resp.(*cyclesv1.UpdateTenantResponse).GetTenant()) })
}

// ---- API keys -----------------------------------------------------------------

// A key_id is "<tenant>_<16 hex>" on both wires (auth.PublicKeyID, set by
// the domain answers this wire passes on): the admin spec's key paths carry
// only the key id, and cyclesd locates a key inside its tenant.
func splitKeyID(s string) (tenant, keyID string, err error) {
	tenant, keyID, ok := auth.SplitKeyID(s)
	if !ok {
		return "", "", apierr.Invalid("key_id", "is not a cyclesd key id (<tenant>_<16 hex>)")
	}
	return tenant, keyID, nil
}

// neverExpires is expires_at of a key without expiry: the spec requires the
// field on every key answer.
const neverExpires = "9999-12-31T23:59:59.999Z"

type apiKeyOut struct {
	KeyID         string            `json:"key_id"`
	KeySecret     string            `json:"key_secret,omitempty"`
	KeyPrefix     string            `json:"key_prefix"`
	TenantID      string            `json:"tenant_id"`
	Name          string            `json:"name,omitempty"`
	Description   string            `json:"description,omitempty"`
	Permissions   []string          `json:"permissions"`
	Status        string            `json:"status,omitempty"`
	CreatedAt     string            `json:"created_at"`
	ExpiresAt     string            `json:"expires_at"`
	RevokedAt     string            `json:"revoked_at,omitempty"`
	RevokedReason string            `json:"revoked_reason,omitempty"`
	Metadata      map[string]string `json:"metadata,omitempty"`
	ScopeFilter   []string          `json:"scope_filter,omitempty"`
	LastUsedAt    string            `json:"last_used_at,omitempty"`
}

func apiKeyOf(k *cyclesv1.ApiKey, secret string, withStatus bool) *apiKeyOut {
	out := &apiKeyOut{KeyID: k.GetKeyId(), KeySecret: secret,
		KeyPrefix: "cyc_" + k.GetKeyId(), TenantID: k.GetTenantId(),
		Permissions: k.GetPermissions(), CreatedAt: isoTime(k.GetCreatedAtMs()), ExpiresAt: neverExpires}
	if k.ExpiresAtMs != nil {
		out.ExpiresAt = isoTime(k.GetExpiresAtMs())
	}
	if out.Permissions == nil {
		out.Permissions = []string{}
	}
	if withStatus {
		out.Name = k.GetName()
		out.Description = k.GetDescription()
		out.Status = keyStatusNames[int32(k.GetStatus())]
		out.RevokedAt = isoTime(k.GetRevokedAtMs())
		out.RevokedReason = k.GetRevokedReason()
		out.Metadata = k.GetMetadata()
		out.ScopeFilter = k.GetScopeFilter()
		out.LastUsedAt = isoTime(k.GetLastUsedAtMs())
	}
	return out
}

type apiKeyIn struct {
	TenantID    string         `json:"tenant_id"`
	Name        string         `json:"name"`
	Description string         `json:"description"`
	Permissions []string       `json:"permissions"`
	ScopeFilter []string       `json:"scope_filter"`
	ExpiresAt   string         `json:"expires_at"`
	Metadata    map[string]any `json:"metadata"`
}

func (a *API) createAPIKey(w http.ResponseWriter, r *http.Request) {
	var in apiKeyIn
	req, err := decodeInto(a, w, r, &in, func() (*cyclesv1.CreateApiKeyRequest, error) {
		out := &cyclesv1.CreateApiKeyRequest{TenantId: in.TenantID, Name: in.Name, Description: in.Description,
			Permissions: in.Permissions, ScopeFilter: in.ScopeFilter}
		if in.ExpiresAt != "" {
			t, err := time.Parse(time.RFC3339Nano, in.ExpiresAt)
			if err != nil {
				return nil, apierr.Invalid("expires_at", "must be an RFC 3339 date-time")
			}
			ms := t.UnixMilli()
			out.ExpiresAtMs = &ms
		}
		if len(in.Metadata) > 0 {
			out.Metadata = make(map[string]string, len(in.Metadata))
			for k, v := range in.Metadata {
				sv, ok := v.(string)
				if !ok {
					return nil, apierr.Invalid("metadata."+k, "cyclesd key metadata values are strings")
				}
				out.Metadata[k] = sv
			}
		}
		return out, nil
	})
	a.admin(w, r, cyclesv1.AdminService_CreateApiKey_FullMethodName, http.StatusCreated, req, err,
		func(ctx context.Context, req any) (any, error) {
			return a.adm.CreateApiKey(ctx, req.(*cyclesv1.CreateApiKeyRequest))
		},
		func(resp any) any {
			k := resp.(*cyclesv1.CreateApiKeyResponse)
			return apiKeyOf(k.GetApiKey(), k.GetSecret(), false)
		})
}

type apiKeysOut struct {
	Keys       []*apiKeyOut `json:"keys"`
	NextCursor string       `json:"next_cursor,omitempty"`
	HasMore    bool         `json:"has_more"`
}

// listAPIKeys serves GET /v1/admin/api-keys over AdminService.ListApiKeys.
// Without tenant_id it lists every tenant's keys (tenant_id, then key id
// order); status, search, limit and cursor are served; sort_by and sort_dir
// are ignored (the spec lets a server ignore them). status EXPIRED matches
// nothing: an expired key keeps its stored status ACTIVE (it is refused at
// authentication from its expires_at on), so listing by EXPIRED is not served.
func (a *API) listAPIKeys(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	req := &cyclesv1.ListApiKeysRequest{TenantId: q.Get("tenant_id"), Search: q.Get("search"), Cursor: q.Get("cursor")}
	var err error
	expired := false
	if s := q.Get("status"); s != "" && err == nil {
		if s == "EXPIRED" {
			expired = true
		} else {
			var v int32
			if v, err = parseEnum("status", s, keyStatusValues); err == nil {
				req.Status = cyclesv1.ApiKeyStatus(v)
			}
		}
	}
	if err == nil {
		req.Limit, err = limitParam(q)
	}
	a.admin(w, r, cyclesv1.AdminService_ListApiKeys_FullMethodName, http.StatusOK, req, err,
		func(ctx context.Context, req any) (any, error) {
			l, err := a.adm.ListApiKeys(ctx, req.(*cyclesv1.ListApiKeysRequest))
			if err == nil && expired {
				l = &cyclesv1.ListApiKeysResponse{} // the tenant exists; none of its keys has expired
			}
			return l, err
		},
		func(resp any) any {
			l := resp.(*cyclesv1.ListApiKeysResponse)
			out := &apiKeysOut{Keys: make([]*apiKeyOut, 0, len(l.GetApiKeys())), NextCursor: l.GetNextCursor(), HasMore: l.GetHasMore()}
			for _, k := range l.GetApiKeys() {
				out.Keys = append(out.Keys, apiKeyOf(k, "", true))
			}
			return out
		})
}

func (a *API) revokeAPIKey(w http.ResponseWriter, r *http.Request) {
	tenant, keyID, err := splitKeyID(r.PathValue("key_id"))
	req := &cyclesv1.RevokeApiKeyRequest{TenantId: tenant, KeyId: keyID}
	a.admin(w, r, cyclesv1.AdminService_RevokeApiKey_FullMethodName, http.StatusOK, req, err,
		func(ctx context.Context, req any) (any, error) {
			return a.adm.RevokeApiKey(ctx, req.(*cyclesv1.RevokeApiKeyRequest))
		},
		func(resp any) any { return apiKeyOf(resp.(*cyclesv1.RevokeApiKeyResponse).GetApiKey(), "", true) })
}

// ---- budgets ------------------------------------------------------------------

type ledgerOut struct {
	LedgerID            string    `json:"ledger_id"`
	TenantID            string    `json:"tenant_id"`
	Scope               string    `json:"scope"`
	ScopePath           string    `json:"scope_path"`
	Unit                string    `json:"unit"`
	Allocated           amountOut `json:"allocated"`
	Remaining           amountOut `json:"remaining"`
	Reserved            amountOut `json:"reserved"`
	Spent               amountOut `json:"spent"`
	Debt                amountOut `json:"debt"`
	OverdraftLimit      amountOut `json:"overdraft_limit"`
	IsOverLimit         bool      `json:"is_over_limit"`
	CommitOveragePolicy string    `json:"commit_overage_policy,omitempty"`
	Status              string    `json:"status"`
	CreatedAt           string    `json:"created_at"`
	UpdatedAt           string    `json:"updated_at,omitempty"`
}

func ledgerOf(b *cyclesv1.Budget) *ledgerOut {
	u := unitName(b.GetUnit())
	amt := func(n int64) amountOut { return amountOut{Unit: u, Amount: n} }
	return &ledgerOut{
		LedgerID: b.GetScopePath() + "|" + u, // as budget events name it
		TenantID: b.GetTenantId(), Scope: b.GetScopePath(), ScopePath: b.GetScopePath(),
		Unit: u, Allocated: amt(b.GetAllocated()), Remaining: amt(b.GetRemaining()), Reserved: amt(b.GetReserved()),
		Spent: amt(b.GetSpent()), Debt: amt(b.GetDebt()), OverdraftLimit: amt(b.GetOverdraftLimit()),
		IsOverLimit: b.GetIsOverLimit(), CommitOveragePolicy: policyNames[int32(b.GetCommitOveragePolicy())],
		Status: budgetStatusNames[int32(b.GetStatus())], CreatedAt: isoTime(b.GetCreatedAtMs()), UpdatedAt: isoTime(b.GetUpdatedAtMs()),
	}
}

// tenantOfScope reads the tenant of a canonical scope path ("tenant:<id>/...").
func tenantOfScope(path string) string { return scope.TenantOf(path) }

// budgetKey reads ?scope=&unit=[&tenant_id=]: the budget a route acts on.
func budgetKey(q url.Values) (tenant, scope string, unit cyclesv1.Unit, err error) {
	scope = q.Get("scope")
	if scope == "" {
		return "", "", 0, apierr.Invalid("scope", "query parameter is required")
	}
	u := q.Get("unit")
	if u == "" {
		return "", "", 0, apierr.Invalid("unit", "query parameter is required")
	}
	v, err := parseEnum("unit", u, unitValues)
	if err != nil {
		return "", "", 0, err
	}
	tenant = q.Get("tenant_id")
	if tenant == "" {
		tenant = tenantOfScope(scope)
	}
	return tenant, scope, cyclesv1.Unit(v), nil
}

func stringMap(field string, m map[string]any) (map[string]string, error) {
	if m == nil {
		return nil, nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		s, ok := v.(string)
		if !ok {
			return nil, apierr.Invalid(field+"."+k, "must be a string (cyclesd keeps string metadata on budgets)")
		}
		out[k] = s
	}
	return out, nil
}

type budgetIn struct {
	TenantID            string         `json:"tenant_id"`
	Scope               string         `json:"scope"`
	Unit                string         `json:"unit"`
	Allocated           *amountIn      `json:"allocated"`
	OverdraftLimit      *amountIn      `json:"overdraft_limit"`
	CommitOveragePolicy *string        `json:"commit_overage_policy"`
	RolloverPolicy      string         `json:"rollover_policy"`
	PeriodStart         string         `json:"period_start"`
	PeriodEnd           string         `json:"period_end"`
	Metadata            map[string]any `json:"metadata"`
}

// unitAmount reads an Amount that must be in the budget's unit.
func unitAmount(field string, a *amountIn, unit cyclesv1.Unit) (int64, error) {
	p, err := a.proto(field)
	if err != nil || p == nil {
		return 0, err
	}
	if p.GetUnit() != unit {
		return 0, apierr.New(apierr.UnitMismatch, "%s.unit must be the budget's unit %s", field, unitName(unit)).With("field", field+".unit")
	}
	return p.GetAmount(), nil
}

func (a *API) createBudget(w http.ResponseWriter, r *http.Request) {
	var in budgetIn
	req, err := decodeInto(a, w, r, &in, func() (*cyclesv1.CreateBudgetRequest, error) {
		if in.RolloverPolicy != "" && in.RolloverPolicy != "NONE" {
			return nil, apierr.Invalid("rollover_policy", "only NONE is supported")
		}
		if in.PeriodStart != "" || in.PeriodEnd != "" {
			return nil, apierr.Invalid("period_start", "budget periods are not supported; use fund RESET_SPENT at a period boundary")
		}
		v, err := parseEnum("unit", in.Unit, unitValues)
		if err != nil {
			return nil, err
		}
		unit := cyclesv1.Unit(v)
		if in.Allocated == nil {
			return nil, apierr.Invalid("allocated", "is required")
		}
		alloc, err := unitAmount("allocated", in.Allocated, unit)
		if err != nil {
			return nil, err
		}
		var limit int64
		if in.OverdraftLimit != nil {
			if limit, err = unitAmount("overdraft_limit", in.OverdraftLimit, unit); err != nil {
				return nil, err
			}
		}
		pol, err := policyOf("commit_overage_policy", in.CommitOveragePolicy)
		if err != nil {
			return nil, err
		}
		meta, err := stringMap("metadata", in.Metadata)
		if err != nil {
			return nil, err
		}
		tenant := in.TenantID
		if tenant == "" {
			tenant = tenantOfScope(in.Scope)
		}
		return &cyclesv1.CreateBudgetRequest{TenantId: tenant, ScopePath: in.Scope, Unit: unit, Allocated: alloc,
			OverdraftLimit: limit, CommitOveragePolicy: pol, Metadata: meta}, nil
	})
	a.admin(w, r, cyclesv1.AdminService_CreateBudget_FullMethodName, http.StatusCreated, req, err,
		func(ctx context.Context, req any) (any, error) {
			return a.adm.CreateBudget(ctx, req.(*cyclesv1.CreateBudgetRequest))
		},
		func(resp any) any { return ledgerOf(resp.(*cyclesv1.CreateBudgetResponse).GetBudget()) })
}

type ledgersOut struct {
	Ledgers    []*ledgerOut `json:"ledgers"`
	NextCursor string       `json:"next_cursor,omitempty"`
	HasMore    bool         `json:"has_more"`
}

func (a *API) listBudgets(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	req := &cyclesv1.ListBudgetsRequest{TenantId: q.Get("tenant_id"), ScopePrefix: q.Get("scope_prefix"), Cursor: q.Get("cursor")}
	var err error // the tenant, when tenant_id is absent: AdminService.ListBudgets
	if s := q.Get("unit"); s != "" {
		var v int32
		if v, err = parseEnum("unit", s, unitValues); err == nil {
			req.Unit = cyclesv1.Unit(v)
		}
	}
	if err == nil {
		req.Limit, err = limitParam(q)
	}
	a.admin(w, r, cyclesv1.AdminService_ListBudgets_FullMethodName, http.StatusOK, req, err,
		func(ctx context.Context, req any) (any, error) {
			return a.adm.ListBudgets(ctx, req.(*cyclesv1.ListBudgetsRequest))
		},
		func(resp any) any {
			l := resp.(*cyclesv1.ListBudgetsResponse)
			out := &ledgersOut{Ledgers: make([]*ledgerOut, 0, len(l.GetBudgets())), NextCursor: l.GetNextCursor(), HasMore: l.GetHasMore()}
			for _, b := range l.GetBudgets() {
				out.Ledgers = append(out.Ledgers, ledgerOf(b))
			}
			return out
		})
}

func (a *API) lookupBudget(w http.ResponseWriter, r *http.Request) {
	tenant, scope, unit, err := budgetKey(r.URL.Query())
	req := &cyclesv1.GetBudgetRequest{TenantId: tenant, ScopePath: scope, Unit: unit}
	a.admin(w, r, cyclesv1.AdminService_GetBudget_FullMethodName, http.StatusOK, req, err,
		func(ctx context.Context, req any) (any, error) {
			return a.adm.GetBudget(ctx, req.(*cyclesv1.GetBudgetRequest))
		},
		func(resp any) any { return ledgerOf(resp.(*cyclesv1.GetBudgetResponse).GetBudget()) })
}

type budgetUpdateIn struct {
	OverdraftLimit      *amountIn      `json:"overdraft_limit"`
	CommitOveragePolicy *string        `json:"commit_overage_policy"`
	Metadata            map[string]any `json:"metadata"`
}

func (a *API) updateBudget(w http.ResponseWriter, r *http.Request) {
	tenant, scope, unit, err := budgetKey(r.URL.Query())
	var req any
	if err == nil {
		var in budgetUpdateIn
		req, err = decodeInto(a, w, r, &in, func() (*cyclesv1.UpdateBudgetRequest, error) {
			up := &cyclesv1.UpdateBudgetRequest{TenantId: tenant, ScopePath: scope, Unit: unit}
			if in.OverdraftLimit != nil {
				n, err := unitAmount("overdraft_limit", in.OverdraftLimit, unit)
				if err != nil {
					return nil, err
				}
				up.OverdraftLimit = &n
			}
			pol, err := policyOf("commit_overage_policy", in.CommitOveragePolicy)
			if err != nil {
				return nil, err
			}
			up.CommitOveragePolicy = pol
			if up.Metadata, err = stringMap("metadata", in.Metadata); err != nil {
				return nil, err
			}
			return up, nil
		})
	}
	a.admin(w, r, cyclesv1.AdminService_UpdateBudget_FullMethodName, http.StatusOK, req, err,
		func(ctx context.Context, req any) (any, error) {
			return a.adm.UpdateBudget(ctx, req.(*cyclesv1.UpdateBudgetRequest))
		},
		func(resp any) any { return ledgerOf(resp.(*cyclesv1.UpdateBudgetResponse).GetBudget()) })
}

type fundIn struct {
	Operation      string         `json:"operation"`
	Amount         *amountIn      `json:"amount"`
	Spent          *amountIn      `json:"spent"`
	Reason         string         `json:"reason"`
	IdempotencyKey string         `json:"idempotency_key"`
	Metadata       map[string]any `json:"metadata"`
}

type fundOut struct {
	Operation         string    `json:"operation"`
	PreviousAllocated amountOut `json:"previous_allocated"`
	NewAllocated      amountOut `json:"new_allocated"`
	PreviousRemaining amountOut `json:"previous_remaining"`
	NewRemaining      amountOut `json:"new_remaining"`
	PreviousDebt      amountOut `json:"previous_debt"`
	NewDebt           amountOut `json:"new_debt"`
	PreviousSpent     amountOut `json:"previous_spent"`
	NewSpent          amountOut `json:"new_spent"`
	Timestamp         string    `json:"timestamp,omitempty"`
}

func (a *API) fundBudget(w http.ResponseWriter, r *http.Request) {
	tenant, scope, unit, err := budgetKey(r.URL.Query())
	var req any
	if err == nil {
		var in fundIn
		req, err = decodeInto(a, w, r, &in, func() (*cyclesv1.FundBudgetRequest, error) {
			op, err := parseEnum("operation", in.Operation, fundingValues)
			if err != nil {
				return nil, err
			}
			if in.Amount == nil {
				return nil, apierr.Invalid("amount", "is required")
			}
			amt, err := unitAmount("amount", in.Amount, unit)
			if err != nil {
				return nil, err
			}
			f := &cyclesv1.FundBudgetRequest{TenantId: tenant, ScopePath: scope, Unit: unit, Operation: cyclesv1.FundingOperation(op),
				Amount: amt, Reason: in.Reason, IdempotencyKey: in.IdempotencyKey}
			if in.Spent != nil {
				s, err := unitAmount("spent", in.Spent, unit)
				if err != nil {
					return nil, err
				}
				f.Spent = &s
			}
			return f, nil
		})
	}
	a.admin(w, r, cyclesv1.AdminService_FundBudget_FullMethodName, http.StatusOK, req, err,
		func(ctx context.Context, req any) (any, error) {
			return a.adm.FundBudget(ctx, req.(*cyclesv1.FundBudgetRequest))
		},
		func(resp any) any {
			f := resp.(*cyclesv1.FundBudgetResponse)
			u := unitName(f.GetBudget().GetUnit())
			amt := func(n int64) amountOut { return amountOut{Unit: u, Amount: n} }
			return &fundOut{Operation: fundingNames[int32(f.GetOperation())],
				PreviousAllocated: amt(f.GetPreviousAllocated()), NewAllocated: amt(f.GetNewAllocated()),
				PreviousRemaining: amt(f.GetPreviousRemaining()), NewRemaining: amt(f.GetNewRemaining()),
				PreviousDebt: amt(f.GetPreviousDebt()), NewDebt: amt(f.GetNewDebt()),
				PreviousSpent: amt(f.GetPreviousSpent()), NewSpent: amt(f.GetNewSpent()), Timestamp: isoTime(f.GetTimestampMs())}
		})
}

type transitionIn struct {
	Reason   string         `json:"reason"`
	Metadata map[string]any `json:"metadata"`
}

// transition reads ?scope=&unit= and the optional {reason, metadata} body.
func (a *API) transition(w http.ResponseWriter, r *http.Request) (tenant, scope string, unit cyclesv1.Unit, reason string, err error) {
	if tenant, scope, unit, err = budgetKey(r.URL.Query()); err != nil {
		return
	}
	if r.ContentLength == 0 {
		return
	}
	var in transitionIn
	if err = a.decodeJSON(w, r, &in); err != nil {
		return
	}
	return tenant, scope, unit, in.Reason, nil
}

func (a *API) freezeBudget(w http.ResponseWriter, r *http.Request) {
	tenant, scope, unit, reason, err := a.transition(w, r)
	req := &cyclesv1.FreezeBudgetRequest{TenantId: tenant, ScopePath: scope, Unit: unit, Reason: reason}
	a.admin(w, r, cyclesv1.AdminService_FreezeBudget_FullMethodName, http.StatusOK, req, err,
		func(ctx context.Context, req any) (any, error) {
			return a.adm.FreezeBudget(ctx, req.(*cyclesv1.FreezeBudgetRequest))
		},
		func(resp any) any { return ledgerOf(resp.(*cyclesv1.FreezeBudgetResponse).GetBudget()) })
}

func (a *API) unfreezeBudget(w http.ResponseWriter, r *http.Request) {
	tenant, scope, unit, reason, err := a.transition(w, r)
	req := &cyclesv1.UnfreezeBudgetRequest{TenantId: tenant, ScopePath: scope, Unit: unit, Reason: reason}
	a.admin(w, r, cyclesv1.AdminService_UnfreezeBudget_FullMethodName, http.StatusOK, req, err,
		func(ctx context.Context, req any) (any, error) {
			return a.adm.UnfreezeBudget(ctx, req.(*cyclesv1.UnfreezeBudgetRequest))
		},
		func(resp any) any { return ledgerOf(resp.(*cyclesv1.UnfreezeBudgetResponse).GetBudget()) })
}

func (a *API) closeBudget(w http.ResponseWriter, r *http.Request) {
	tenant, scope, unit, reason, err := a.transition(w, r)
	req := &cyclesv1.CloseBudgetRequest{TenantId: tenant, ScopePath: scope, Unit: unit, Reason: reason}
	a.admin(w, r, cyclesv1.AdminService_CloseBudget_FullMethodName, http.StatusOK, req, err,
		func(ctx context.Context, req any) (any, error) {
			return a.adm.CloseBudget(ctx, req.(*cyclesv1.CloseBudgetRequest))
		},
		func(resp any) any { return ledgerOf(resp.(*cyclesv1.CloseBudgetResponse).GetBudget()) })
}

// ---- introspection ---------------------------------------------------------------

type introspectOut struct {
	Authenticated bool            `json:"authenticated"`
	AuthType      string          `json:"auth_type"`
	Permissions   []string        `json:"permissions"`
	Capabilities  map[string]bool `json:"capabilities"`
	TenantID      string          `json:"tenant_id,omitempty"`
	ScopeFilter   []string        `json:"scope_filter,omitempty"`
	// KeyID is cyclesd's addition: the key's id as the admin routes name it.
	KeyID string `json:"key_id,omitempty"`
}

// introspect answers who the credential is (AuthService.Introspect): the
// admin ("*") or a tenant key with its permissions and capabilities.
func (a *API) introspect(w http.ResponseWriter, r *http.Request) {
	a.serve(w, r, route{server.IntrospectMethod, adminPlane, http.StatusOK}, &cyclesv1.IntrospectRequest{}, nil,
		func(ctx context.Context, _ any) (any, error) { return authapi.Introspect(ctx) },
		func(resp any) any {
			in := resp.(*cyclesv1.IntrospectResponse)
			out := &introspectOut{Authenticated: in.GetAuthenticated(), AuthType: in.GetAuthType(),
				Permissions: in.GetPermissions(), Capabilities: in.GetCapabilities(), TenantID: in.GetTenantId(),
				ScopeFilter: in.GetScopeFilter()}
			out.KeyID = in.GetKeyId()
			return out
		})
}

// notServed answers a JSON 404 for protocol endpoints cyclesd does not serve.
func (a *API) notServed(w http.ResponseWriter, r *http.Request, why string) {
	writeBareError(w, r, http.StatusNotFound, apierr.NotFound,
		r.Method+" "+r.URL.Path+" is not served by cyclesd: "+why+" (docs/http-api.md)")
}

// observeModeOut is a tenant's observe_mode on the wire: omitted for ENFORCE
// (and unset), else its name.
func observeModeOut(m cyclesv1.ObserveMode) string {
	if n := actionkind.ObserveModeName(m); n != "ENFORCE" {
		return n
	}
	return ""
}
