package cycleshttp

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

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
	tenantStatusNames  = enumNames(cyclesv1.TenantStatus(0).Descriptor())
	tenantStatusValues = enumValues(tenantStatusNames)
	keyStatusNames     = enumNames(cyclesv1.ApiKeyStatus(0).Descriptor())
	budgetStatusNames  = enumNames(cyclesv1.BudgetStatus(0).Descriptor())
	fundingNames       = enumNames(cyclesv1.FundingOperation(0).Descriptor())
	fundingValues      = enumValues(fundingNames)
)

func isoTime(ms int64) string {
	if ms == 0 {
		return ""
	}
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z")
}

// adminRoutes are the admin plane's routes over AdminService (and
// AuthService's introspection).
func (a *API) adminRoutes() []endpoint {
	adm, offAdmin := a.adm, off("the admin service is not enabled on this server")
	keyList := query(q("tenant_id"), q("search"), q("cursor"), q("limit"))
	budgetKey := query(qf("scope", "scope_path").must(), q("unit").must(), q("tenant_id"))
	keysPage := shaped[*cyclesv1.ListApiKeysResponse](page("keys=api_keys",
		item(func(k *cyclesv1.ApiKey) *apiKeyOut { return apiKeyOf(k, "", true) })))
	return []endpoint{
		on(a, "POST /v1/admin/tenants", cyclesv1.AdminService_CreateTenant_FullMethodName,
			via(adm, cyclesv1.AdminServiceServer.CreateTenant), jsonBody((*tenantIn).fillCreate),
			func(p *cyclesv1.CreateTenantResponse) *tenantOut { return tenantOf(p.GetTenant()) }, created, offAdmin),
		// GET /v1/admin/tenants: the order is always tenant_id ascending, so
		// sort_by and sort_dir are ignored (the spec lets a server ignore
		// them), as is observe_mode (a v0.1.26 extension).
		on(a, "GET /v1/admin/tenants", cyclesv1.AdminService_ListTenants_FullMethodName,
			via(adm, cyclesv1.AdminServiceServer.ListTenants), nil,
			shaped[*cyclesv1.ListTenantsResponse](page("tenants", item(tenantOf))), offAdmin,
			query(refused("parent_tenant_id", "search", "tenant hierarchies are not supported by cyclesd"),
				q("search"), q("cursor"), q("status"), q("limit"))),
		on(a, "GET /v1/admin/tenants/{tenant_id}", cyclesv1.AdminService_GetTenant_FullMethodName,
			via(adm, cyclesv1.AdminServiceServer.GetTenant), nil,
			func(p *cyclesv1.GetTenantResponse) *tenantOut { return tenantOf(p.GetTenant()) }, offAdmin),
		a.updateTenantRoute(),
		on(a, "POST /v1/admin/api-keys", cyclesv1.AdminService_CreateApiKey_FullMethodName,
			via(adm, cyclesv1.AdminServiceServer.CreateApiKey), protoJSON,
			func(k *cyclesv1.CreateApiKeyResponse) *apiKeyOut {
				return apiKeyOf(k.GetApiKey(), k.GetSecret(), false)
			}, created, offAdmin),
		// GET /v1/admin/api-keys: without tenant_id it lists every tenant's
		// keys (tenant_id, then key id order); sort_by and sort_dir are
		// ignored. status EXPIRED matches nothing: an expired key keeps its
		// stored status ACTIVE (it is refused at authentication from its
		// expires_at on), so it answers an empty list once the tenant is known.
		byQuery("GET /v1/admin/api-keys", "status", "EXPIRED",
			on(a, "GET /v1/admin/api-keys", cyclesv1.AdminService_ListApiKeys_FullMethodName,
				via(adm, cyclesv1.AdminServiceServer.ListApiKeys), nil, keysPage, offAdmin, keyList, query(q("status"))),
			on(a, "GET /v1/admin/api-keys", cyclesv1.AdminService_ListApiKeys_FullMethodName,
				func(ctx context.Context, req *cyclesv1.ListApiKeysRequest) (*cyclesv1.ListApiKeysResponse, error) {
					if _, err := adm.ListApiKeys(ctx, req); err != nil {
						return nil, err
					}
					return &cyclesv1.ListApiKeysResponse{}, nil
				}, nil, keysPage, offAdmin, keyList)),
		on(a, "DELETE /v1/admin/api-keys/{key_id}", cyclesv1.AdminService_RevokeApiKey_FullMethodName,
			via(adm, cyclesv1.AdminServiceServer.RevokeApiKey), keyPath[*cyclesv1.RevokeApiKeyRequest](nil),
			func(p *cyclesv1.RevokeApiKeyResponse) *apiKeyOut { return apiKeyOf(p.GetApiKey(), "", true) }, offAdmin),
		on(a, "POST /v1/admin/budgets", cyclesv1.AdminService_CreateBudget_FullMethodName,
			via(adm, cyclesv1.AdminServiceServer.CreateBudget), jsonBody((*budgetIn).fill),
			func(p *cyclesv1.CreateBudgetResponse) *ledgerOut { return ledgerOf(p.GetBudget()) }, created, offAdmin),
		// Without tenant_id, AdminService.ListBudgets walks every tenant.
		on(a, "GET /v1/admin/budgets", cyclesv1.AdminService_ListBudgets_FullMethodName,
			via(adm, cyclesv1.AdminServiceServer.ListBudgets), nil,
			shaped[*cyclesv1.ListBudgetsResponse](page("ledgers=budgets", item(ledgerOf))), offAdmin,
			query(q("tenant_id"), q("scope_prefix"), q("cursor"), q("unit"), q("limit"))),
		on(a, "GET /v1/admin/budgets/lookup", cyclesv1.AdminService_GetBudget_FullMethodName,
			via(adm, cyclesv1.AdminServiceServer.GetBudget), scoped[*cyclesv1.GetBudgetRequest](nil),
			func(p *cyclesv1.GetBudgetResponse) *ledgerOut { return ledgerOf(p.GetBudget()) }, offAdmin, budgetKey),
		on(a, "PATCH /v1/admin/budgets", cyclesv1.AdminService_UpdateBudget_FullMethodName,
			via(adm, cyclesv1.AdminServiceServer.UpdateBudget), scoped(jsonBody((*budgetUpdateIn).fill)),
			func(p *cyclesv1.UpdateBudgetResponse) *ledgerOut { return ledgerOf(p.GetBudget()) }, offAdmin, budgetKey),
		on(a, "POST /v1/admin/budgets/fund", cyclesv1.AdminService_FundBudget_FullMethodName,
			via(adm, cyclesv1.AdminServiceServer.FundBudget), scoped(jsonBody((*fundIn).fill)), fundOf, offAdmin, budgetKey),
		on(a, "POST /v1/admin/budgets/freeze", cyclesv1.AdminService_FreezeBudget_FullMethodName,
			via(adm, cyclesv1.AdminServiceServer.FreezeBudget), scoped(transition[*cyclesv1.FreezeBudgetRequest]),
			func(p *cyclesv1.FreezeBudgetResponse) *ledgerOut { return ledgerOf(p.GetBudget()) }, offAdmin, budgetKey),
		on(a, "POST /v1/admin/budgets/unfreeze", cyclesv1.AdminService_UnfreezeBudget_FullMethodName,
			via(adm, cyclesv1.AdminServiceServer.UnfreezeBudget), scoped(transition[*cyclesv1.UnfreezeBudgetRequest]),
			func(p *cyclesv1.UnfreezeBudgetResponse) *ledgerOut { return ledgerOf(p.GetBudget()) }, offAdmin, budgetKey),
		on(a, "POST /v1/admin/budgets/close", cyclesv1.AdminService_CloseBudget_FullMethodName,
			via(adm, cyclesv1.AdminServiceServer.CloseBudget), scoped(transition[*cyclesv1.CloseBudgetRequest]),
			func(p *cyclesv1.CloseBudgetResponse) *ledgerOut { return ledgerOf(p.GetBudget()) }, offAdmin, budgetKey),
		// Introspection answers who the credential is (AuthService.Introspect):
		// the admin ("*") or a tenant key with its permissions and capabilities.
		on(a, "GET /v1/auth/introspect", server.IntrospectMethod,
			func(ctx context.Context, _ *cyclesv1.IntrospectRequest) (*cyclesv1.IntrospectResponse, error) {
				return authapi.Introspect(ctx)
			}, nil, introspectOf),
	}
}

// byQuery serves pattern with alt when query parameter name is value, else
// with main: one path whose meaning a parameter changes.
func byQuery(pattern, name, value string, main, alt endpoint) endpoint {
	return endpoint{pattern: pattern, h: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get(name) == value {
			alt.h.ServeHTTP(w, r)
			return
		}
		main.h.ServeHTTP(w, r)
	})}
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

func (t *tenantIn) fillCreate(out *cyclesv1.CreateTenantRequest) error {
	if err := t.unsupported(); err != nil {
		return err
	}
	if t.Status != nil {
		return apierr.Invalid("status", "unknown field")
	}
	// A new tenant enforces (the spec's default); OBSERVE is set by PATCH.
	if t.ObserveMode != nil && *t.ObserveMode != "ENFORCE" && *t.ObserveMode != "DISABLED" {
		return apierr.Invalid("observe_mode", "a new tenant enforces; set OBSERVE with PATCH /v1/admin/tenants/{tenant_id}")
	}
	pol, err := policyOf("default_commit_overage_policy", t.DefaultCommitOveragePolicy)
	if err != nil {
		return err
	}
	out.TenantId, out.DefaultCommitOveragePolicy, out.Metadata = t.TenantID, pol, t.Metadata
	if t.Name != nil {
		out.Name = *t.Name
	}
	out.DefaultReservationTtlMs, out.MaxReservationTtlMs, out.MaxReservationExtensions = t.DefaultReservationTTLMs, t.MaxReservationTTLMs, t.MaxReservationExtensions
	return nil
}

// updateTenantRoute is PATCH /v1/admin/tenants/{tenant_id}: the given fields
// change; status CLOSED runs the close cascade (AdminService.CloseTenant) and
// must come alone. It is two routes on one path, told apart by the body.
func (a *API) updateTenantRoute() endpoint {
	const pattern = "PATCH /v1/admin/tenants/{tenant_id}"
	adm, offAdmin := a.adm, off("the admin service is not enabled on this server")
	tenant := func(p interface{ GetTenant() *cyclesv1.Tenant }) *tenantOut { return tenantOf(p.GetTenant()) }
	update := on(a, pattern, cyclesv1.AdminService_UpdateTenant_FullMethodName,
		via(adm, cyclesv1.AdminServiceServer.UpdateTenant), jsonBody((*tenantIn).fillUpdate),
		func(p *cyclesv1.UpdateTenantResponse) *tenantOut { return tenant(p) }, offAdmin)
	closing := on(a, pattern, cyclesv1.AdminService_CloseTenant_FullMethodName,
		via(adm, cyclesv1.AdminServiceServer.CloseTenant), jsonBody((*tenantIn).fillClose),
		func(p *cyclesv1.CloseTenantResponse) *tenantOut { return tenant(p) }, offAdmin)
	return endpoint{pattern: pattern, h: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Peek at the body (bounded; decodeJSON still refuses an oversize one).
		body, err := io.ReadAll(io.LimitReader(r.Body, a.maxBody+1))
		r.Body = io.NopCloser(bytes.NewReader(body))
		var peek struct {
			Status string `json:"status"`
		}
		if err == nil && json.Unmarshal(body, &peek) == nil && peek.Status == "CLOSED" {
			closing.h.ServeHTTP(w, r)
			return
		}
		update.h.ServeHTTP(w, r)
	})}
}

func (t *tenantIn) fillUpdate(up *cyclesv1.UpdateTenantRequest) error {
	if err := t.unsupported(); err != nil {
		return err
	}
	if t.TenantID != "" {
		return apierr.Invalid("tenant_id", "unknown field")
	}
	up.Name, up.DefaultReservationTtlMs, up.MaxReservationTtlMs, up.MaxReservationExtensions, up.Metadata = t.Name,
		t.DefaultReservationTTLMs, t.MaxReservationTTLMs, t.MaxReservationExtensions, t.Metadata
	pol, err := policyOf("default_commit_overage_policy", t.DefaultCommitOveragePolicy)
	if err != nil {
		return err
	}
	up.DefaultCommitOveragePolicy = pol
	if t.ObserveMode != nil {
		m, ok := actionkind.ParseObserveMode(*t.ObserveMode)
		if !ok {
			return apierr.Invalid("observe_mode", "must be DISABLED, OBSERVE or ENFORCE")
		}
		up.ObserveMode = m
	}
	if t.Status != nil {
		v, err := parseEnum("status", *t.Status, tenantStatusValues)
		if err != nil {
			return err
		}
		up.Status = cyclesv1.TenantStatus(v)
	}
	return nil
}

// fillClose: closing a tenant must be the only change in its request.
func (t *tenantIn) fillClose(_ *cyclesv1.CloseTenantRequest) error {
	if err := t.unsupported(); err != nil {
		return err
	}
	if t.TenantID != "" {
		return apierr.Invalid("tenant_id", "unknown field")
	}
	if t.Name != nil || t.Metadata != nil || t.DefaultCommitOveragePolicy != nil || t.DefaultReservationTTLMs != nil ||
		t.MaxReservationTTLMs != nil || t.MaxReservationExtensions != nil || t.ObserveMode != nil {
		return apierr.Invalid("status", "closing a tenant must be the only change in its request")
	}
	return nil
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

// keyPath reads the {key_id} path parameter into the request's tenant_id
// and key_id, then runs read (if any).
func keyPath[Req interface {
	proto.Message
	GetKeyId() string
}](read func(*API, http.ResponseWriter, *http.Request, Req) error) func(*API, http.ResponseWriter, *http.Request, Req) error {
	return func(a *API, w http.ResponseWriter, r *http.Request, req Req) error {
		tenant, keyID, err := splitKeyID(r.PathValue("key_id"))
		if err != nil {
			return err
		}
		m := req.ProtoReflect()
		fields := m.Descriptor().Fields()
		m.Set(fields.ByName("tenant_id"), protoreflect.ValueOfString(tenant))
		m.Set(fields.ByName("key_id"), protoreflect.ValueOfString(keyID))
		if read == nil {
			return nil
		}
		return read(a, w, r, req)
	}
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

// scoped: a budget route's tenant_id defaults to the tenant its scope
// (?scope=, "tenant:<id>/...") names; then read runs (if any).
func scoped[Req proto.Message](read func(*API, http.ResponseWriter, *http.Request, Req) error) func(*API, http.ResponseWriter, *http.Request, Req) error {
	return tenantFrom("scope_path", scope.TenantOf, read)
}

// tenantFrom defaults the request's tenant_id to the tenant field's value
// names (of), then runs read (if any).
func tenantFrom[Req proto.Message](field protoreflect.Name, of func(string) string,
	read func(*API, http.ResponseWriter, *http.Request, Req) error) func(*API, http.ResponseWriter, *http.Request, Req) error {
	return func(a *API, w http.ResponseWriter, r *http.Request, req Req) error {
		m := req.ProtoReflect()
		fields := m.Descriptor().Fields()
		if tenant := fields.ByName("tenant_id"); m.Get(tenant).String() == "" {
			m.Set(tenant, protoreflect.ValueOfString(of(m.Get(fields.ByName(field)).String())))
		}
		if read == nil {
			return nil
		}
		return read(a, w, r, req)
	}
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

func (in *budgetIn) fill(out *cyclesv1.CreateBudgetRequest) error {
	if in.RolloverPolicy != "" && in.RolloverPolicy != "NONE" {
		return apierr.Invalid("rollover_policy", "only NONE is supported")
	}
	if in.PeriodStart != "" || in.PeriodEnd != "" {
		return apierr.Invalid("period_start", "budget periods are not supported; use fund RESET_SPENT at a period boundary")
	}
	v, err := parseEnum("unit", in.Unit, unitValues)
	if err != nil {
		return err
	}
	unit := cyclesv1.Unit(v)
	if in.Allocated == nil {
		return apierr.Invalid("allocated", "is required")
	}
	if out.Allocated, err = unitAmount("allocated", in.Allocated, unit); err != nil {
		return err
	}
	if in.OverdraftLimit != nil {
		if out.OverdraftLimit, err = unitAmount("overdraft_limit", in.OverdraftLimit, unit); err != nil {
			return err
		}
	}
	if out.CommitOveragePolicy, err = policyOf("commit_overage_policy", in.CommitOveragePolicy); err != nil {
		return err
	}
	if out.Metadata, err = stringMap("metadata", in.Metadata); err != nil {
		return err
	}
	out.TenantId, out.ScopePath, out.Unit = in.TenantID, in.Scope, unit
	if out.TenantId == "" {
		out.TenantId = scope.TenantOf(in.Scope)
	}
	return nil
}

type budgetUpdateIn struct {
	OverdraftLimit      *amountIn      `json:"overdraft_limit"`
	CommitOveragePolicy *string        `json:"commit_overage_policy"`
	Metadata            map[string]any `json:"metadata"`
}

// fill: the budget (tenant, scope, unit) comes from the query.
func (in *budgetUpdateIn) fill(up *cyclesv1.UpdateBudgetRequest) error {
	if in.OverdraftLimit != nil {
		n, err := unitAmount("overdraft_limit", in.OverdraftLimit, up.Unit)
		if err != nil {
			return err
		}
		up.OverdraftLimit = &n
	}
	var err error
	if up.CommitOveragePolicy, err = policyOf("commit_overage_policy", in.CommitOveragePolicy); err != nil {
		return err
	}
	up.Metadata, err = stringMap("metadata", in.Metadata)
	return err
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

// fill: the budget (tenant, scope, unit) comes from the query.
func (in *fundIn) fill(f *cyclesv1.FundBudgetRequest) error {
	op, err := parseEnum("operation", in.Operation, fundingValues)
	if err != nil {
		return err
	}
	if in.Amount == nil {
		return apierr.Invalid("amount", "is required")
	}
	if f.Amount, err = unitAmount("amount", in.Amount, f.Unit); err != nil {
		return err
	}
	f.Operation, f.Reason, f.IdempotencyKey = cyclesv1.FundingOperation(op), in.Reason, in.IdempotencyKey
	if in.Spent != nil {
		s, err := unitAmount("spent", in.Spent, f.Unit)
		if err != nil {
			return err
		}
		f.Spent = &s
	}
	return nil
}

func fundOf(f *cyclesv1.FundBudgetResponse) *fundOut {
	u := unitName(f.GetBudget().GetUnit())
	amt := func(n int64) amountOut { return amountOut{Unit: u, Amount: n} }
	return &fundOut{Operation: fundingNames[int32(f.GetOperation())],
		PreviousAllocated: amt(f.GetPreviousAllocated()), NewAllocated: amt(f.GetNewAllocated()),
		PreviousRemaining: amt(f.GetPreviousRemaining()), NewRemaining: amt(f.GetNewRemaining()),
		PreviousDebt: amt(f.GetPreviousDebt()), NewDebt: amt(f.GetNewDebt()),
		PreviousSpent: amt(f.GetPreviousSpent()), NewSpent: amt(f.GetNewSpent()), Timestamp: isoTime(f.GetTimestampMs())}
}

type transitionIn struct {
	Reason   string         `json:"reason"`
	Metadata map[string]any `json:"metadata"`
}

// transition reads a budget transition's optional {reason, metadata} body
// into the request's reason (metadata is accepted and not kept).
func transition[Req proto.Message](a *API, w http.ResponseWriter, r *http.Request, req Req) error {
	if r.ContentLength == 0 {
		return nil
	}
	var in transitionIn
	if err := a.decodeJSON(w, r, &in); err != nil {
		return err
	}
	m := req.ProtoReflect()
	m.Set(m.Descriptor().Fields().ByName("reason"), protoreflect.ValueOfString(in.Reason))
	return nil
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

func introspectOf(in *cyclesv1.IntrospectResponse) *introspectOut {
	return &introspectOut{Authenticated: in.GetAuthenticated(), AuthType: in.GetAuthType(),
		Permissions: in.GetPermissions(), Capabilities: in.GetCapabilities(), TenantID: in.GetTenantId(),
		ScopeFilter: in.GetScopeFilter(), KeyID: in.GetKeyId()}
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
