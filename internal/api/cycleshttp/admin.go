package cycleshttp

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/actionkind"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/protowire"
	"github.com/cyclesgo/cycles-go/internal/scope"
)

// The admin surface's answer shapes and request steps, in the governance
// spec's shapes (cycles-governance-admin-v0.1.25); what is not served is
// listed in docs/http-api.md.

// ---- tenants ------------------------------------------------------------------

// tenantShape is the spec's Tenant. observe_mode (v0.1.26) is present only
// when it is not ENFORCE: the v0.1.25 Tenant schema is closed, and its
// clients (the dashboard, contract tests) must see no change until a tenant
// uses it.
var tenantShape = protowire.ShapeOf("tenant_id", "name", "status", "default_commit_overage_policy?", "default_reservation_ttl_ms?",
	"max_reservation_ttl_ms?", "max_reservation_extensions", "metadata?", "created_at", "updated_at?", "closed_at?", "observe_mode").
	Calc("observe_mode", func(m protoreflect.Message) (any, bool) {
		n := actionkind.ObserveModeName(m.Interface().(*cyclesv1.Tenant).GetObserveMode())
		return n, n != "ENFORCE" && n != ""
	})

// closeOrUpdate is PATCH /v1/admin/tenants/{tenant_id}: the given fields
// change (UpdateTenant); status CLOSED runs the close cascade
// (AdminService.CloseTenant) and must come alone. It is two routes on one
// path, told apart by the body.
func closeOrUpdate(a *API, update *route) http.Handler {
	md := cyclesv1.File_cycles_v1_admin_proto.Services().ByName("AdminService").Methods().ByName("CloseTenant")
	closing := newRoute(a, cyclesv1.AdminService_CloseTenant_FullMethodName, md, &cyclesv1.HttpRoute{Pattern: update.spec.GetPattern()},
		wire{before: closeBody})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Peek at the body (bounded; readBody still refuses an oversize one).
		body, err := io.ReadAll(io.LimitReader(r.Body, a.maxBody+1))
		r.Body = io.NopCloser(bytes.NewReader(body))
		var peek struct {
			Status string `json:"status"`
		}
		if err == nil && json.Unmarshal(body, &peek) == nil && peek.Status == "CLOSED" {
			closing.ServeHTTP(w, r)
			return
		}
		update.ServeHTTP(w, r)
	})
}

// expiredKeys is GET /v1/admin/api-keys: status EXPIRED matches nothing (an
// expired key keeps its stored status ACTIVE and is refused at
// authentication from its expires_at on), so it answers an empty list once
// the tenant is known.
func expiredKeys(a *API, list *route) http.Handler {
	spec := proto.Clone(list.spec).(*cyclesv1.HttpRoute)
	spec.Query = slices.DeleteFunc(spec.Query, func(q string) bool { return q == "status" })
	none := newRoute(a, list.method, list.md, spec, wire{})
	if list.call != nil {
		none.call = func(ctx context.Context, req proto.Message) (any, error) {
			if _, err := list.call(ctx, req); err != nil {
				return nil, err
			}
			return &cyclesv1.ListApiKeysResponse{}, nil
		}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("status") == "EXPIRED" {
			none.ServeHTTP(w, r)
			return
		}
		list.ServeHTTP(w, r)
	})
}

// closeBody: closing a tenant ({"status":"CLOSED"}) must be the only
// change in its request.
func closeBody(a *API, w http.ResponseWriter, r *http.Request, req proto.Message) error {
	id := req.(*cyclesv1.CloseTenantRequest).GetTenantId()
	up := &cyclesv1.UpdateTenantRequest{TenantId: id}
	if err := protoJSON(a, w, r, up); err != nil {
		return err
	}
	if !proto.Equal(up, &cyclesv1.UpdateTenantRequest{TenantId: id, Status: cyclesv1.TenantStatus_TENANT_STATUS_CLOSED}) {
		return apierr.Invalid("status", "closing a tenant must be the only change in its request")
	}
	return nil
}

// ---- API keys -----------------------------------------------------------------

// neverExpires is expires_at of a key without expiry: the spec requires the
// field on every key answer.
const neverExpires = "9999-12-31T23:59:59.999Z"

// apiKeyShape is the spec's ApiKey. key_prefix is cyclesd's public key id
// behind "cyc_", and expires_at is required by the spec, so a key without
// expiry answers neverExpires.
var apiKeyShape = protowire.ShapeOf("key_id", "key_prefix", "tenant_id", "name?", "description?", "permissions", "status?", "created_at",
	"expires_at", "revoked_at?", "revoked_reason?", "metadata?", "scope_filter?", "last_used_at?").
	Calc("key_prefix", keyPrefix).Calc("expires_at", keyExpiry)

// newKeyShape is the spec's ApiKeyCreateResponse: the new key with its
// secret, shown once.
var newKeyShape = protowire.ShapeOf("key_id=api_key.key_id", "key_secret=secret?", "key_prefix", "tenant_id=api_key.tenant_id",
	"permissions=api_key.permissions", "created_at=api_key.created_at", "expires_at").
	Calc("key_prefix", ofKey(keyPrefix)).Calc("expires_at", ofKey(keyExpiry))

func keyPrefix(m protoreflect.Message) (any, bool) {
	return "cyc_" + m.Interface().(*cyclesv1.ApiKey).GetKeyId(), true
}
func keyExpiry(m protoreflect.Message) (any, bool) {
	return expiry(m.Interface().(*cyclesv1.ApiKey).ExpiresAtMs), true
}

// ofKey computes a key member of a create answer from its api_key.
func ofKey(f func(protoreflect.Message) (any, bool)) func(protoreflect.Message) (any, bool) {
	return func(m protoreflect.Message) (any, bool) { return f(protowire.Descend(m, protowire.Path("api_key"))) }
}

// expiry is a key's expires_at: neverExpires when it has none.
func expiry(ms *int64) string {
	if ms != nil {
		return protowire.ISOTime(*ms)
	}
	return neverExpires
}

// keyPath reads the {key_id} path parameter into the request's tenant_id
// and key_id. A key_id is "<tenant>_<16 hex>" on both wires
// (auth.PublicKeyID, set by the domain answers this wire passes on): the
// admin spec's key paths carry only the key id, and cyclesd locates a key
// inside its tenant.
func keyPath(_ *API, _ http.ResponseWriter, r *http.Request, req proto.Message) error {
	tenant, keyID, ok := auth.SplitKeyID(r.PathValue("key_id"))
	if !ok {
		return apierr.Invalid("key_id", "is not a cyclesd key id (<tenant>_<16 hex>)")
	}
	m := req.ProtoReflect()
	fields := m.Descriptor().Fields()
	m.Set(fields.ByName("tenant_id"), protoreflect.ValueOfString(tenant))
	m.Set(fields.ByName("key_id"), protoreflect.ValueOfString(keyID))
	return nil
}

// ---- budgets ------------------------------------------------------------------

// ledgerShape is the spec's BudgetLedger: the proto's bare amounts as
// amount objects in the budget's unit; ledger_id is "<scope>|<unit>", as
// budget events name it.
var ledgerShape = protowire.ShapeOf("ledger_id", "tenant_id", "scope=scope_path", "scope_path", "unit", "allocated=allocated:unit",
	"remaining=remaining:unit", "reserved=reserved:unit", "spent=spent:unit", "debt=debt:unit",
	"overdraft_limit=overdraft_limit:unit", "is_over_limit", "commit_overage_policy?", "status", "created_at", "updated_at?").
	Calc("ledger_id", func(m protoreflect.Message) (any, bool) {
		b := m.Interface().(*cyclesv1.Budget)
		return b.GetScopePath() + "|" + protowire.EnumName(b.GetUnit().Descriptor(), b.GetUnit().Number()), true
	})

// fundShape is the spec's BudgetFundingResponse, amounts in the budget's unit.
var fundShape = protowire.ShapeOf("operation", "previous_allocated:budget.unit", "new_allocated:budget.unit",
	"previous_remaining:budget.unit", "new_remaining:budget.unit", "previous_debt:budget.unit", "new_debt:budget.unit",
	"previous_spent:budget.unit", "new_spent:budget.unit", "timestamp?")

// scoped: a budget route's tenant_id defaults to the tenant its scope
// (?scope=, "tenant:<id>/...") names.
var scoped = tenantFrom("scope_path", scope.TenantOf)

// tenantFrom defaults the request's tenant_id to the tenant field's value
// names (of).
func tenantFrom(field protoreflect.Name, of func(string) string) hook {
	return func(_ *API, _ http.ResponseWriter, _ *http.Request, req proto.Message) error {
		m := req.ProtoReflect()
		fields := m.Descriptor().Fields()
		if tenant := fields.ByName("tenant_id"); m.Get(tenant).String() == "" {
			m.Set(tenant, protoreflect.ValueOfString(of(m.Get(fields.ByName(field)).String())))
		}
		return nil
	}
}

// notServed answers a JSON 404 for protocol endpoints cyclesd does not serve.
func (a *API) notServed(w http.ResponseWriter, r *http.Request, why string) {
	writeBareError(w, r, http.StatusNotFound, apierr.NotFound,
		r.Method+" "+r.URL.Path+" is not served by cyclesd: "+why+" (docs/http-api.md)")
}

// validateShape is the spec's ApiKeyValidationResponse: a valid key's
// answer carries its expiry (neverExpires when it has none) and its
// permissions ([] when none); an invalid one carries neither.
var validateShape = protowire.ShapeOf("valid", "tenant_id", "key_id?", "permissions", "scope_filter?", "expires_at", "reason?").
	Calc("permissions", func(m protoreflect.Message) (any, bool) {
		v := m.Interface().(*cyclesv1.ValidateResponse)
		if p := v.GetPermissions(); p != nil || !v.GetValid() {
			return p, p != nil
		}
		return []string{}, true
	}).
	Calc("expires_at", func(m protoreflect.Message) (any, bool) {
		v := m.Interface().(*cyclesv1.ValidateResponse)
		return expiry(v.ExpiresAtMs), v.GetValid()
	})
