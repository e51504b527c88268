package cycleshttp_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/test/errtest"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
)

// keysEnv is one tenant with a TOKENS budget at its root and an unnarrowed
// key, on both wires.
type keysEnv struct {
	*env
	tenant string
	as     []string // the admin key's HTTP header
	adm    cyclesv1.AdminServiceClient
	rt     cyclesv1.RuntimeServiceClient
	ev     cyclesv1.EventServiceClient
	authn  cyclesv1.AuthServiceClient
}

func newKeysEnv(t *testing.T) *keysEnv {
	e := startFull(t)
	k := &keysEnv{env: e, tenant: strings.ReplaceAll(ledgertest.NewTenantID(t), "_", "-"), as: []string{"X-Admin-API-Key", adminKey},
		adm: cyclesv1.NewAdminServiceClient(e.conn), rt: cyclesv1.NewRuntimeServiceClient(e.conn),
		ev: cyclesv1.NewEventServiceClient(e.conn), authn: cyclesv1.NewAuthServiceClient(e.conn)}
	k.must("POST", "/v1/admin/tenants", `{"tenant_id":"`+k.tenant+`","name":"Acme"}`, 201)
	k.must("POST", "/v1/admin/budgets", `{"scope":"tenant:`+k.tenant+`","unit":"TOKENS","allocated":{"unit":"TOKENS","amount":1000000}}`, 201)
	return k
}

func (k *keysEnv) must(method, path, body string, want int) map[string]any {
	k.t.Helper()
	r := k.call(method, path, "", body, k.as...)
	if r.status != want {
		k.t.Fatalf("%s %s: %d %s", method, path, r.status, r.body)
	}
	return r.obj(k.t)
}

// key creates a key with the given JSON attributes and returns its secret
// and HTTP key id.
func (k *keysEnv) key(attrs string) (secret, id string) {
	k.t.Helper()
	o := k.must("POST", "/v1/admin/api-keys", `{"tenant_id":"`+k.tenant+`","name":"k"`+attrs+`}`, 201)
	return o["key_secret"].(string), o["key_id"].(string)
}

func adminCtx() context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), auth.AdminKeyHeader, adminKey)
}

func keyCtx(secret string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), auth.APIKeyHeader, secret)
}

func infoOf(err error) map[string]string {
	for _, d := range status.Convert(err).Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei.GetMetadata()
		}
	}
	return nil
}

func wsReserveBody(idem, ws string) string {
	subj := `"agent":"bot"`
	if ws != "" {
		subj = `"workspace":"` + ws + `",` + subj
	}
	return `{"idempotency_key":"` + idem + `","subject":{` + subj + `},` +
		`"action":{"kind":"llm.completion","name":"m"},"estimate":{"unit":"TOKENS","amount":1}}`
}

func reserveReq(idem, ws string) *cyclesv1.CreateReservationRequest {
	return &cyclesv1.CreateReservationRequest{IdempotencyKey: idem, Subject: &cyclesv1.Subject{Workspace: ws, Agent: "bot"},
		Action: &cyclesv1.Action{Kind: "llm.completion", Name: "m"}, Estimate: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 1}}
}

// A key narrowed to workspace:prod names scopes inside it on every call
// that names one, on both wires; outside it, it is refused PERMISSION_DENIED
// / 403 naming the field and the reason.
func TestScopeFilterRefusals(t *testing.T) {
	k := newKeysEnv(t)
	wide, _ := k.key(`,"permissions":["reservations:create","reservations:list","balances:read","events:read"]`)
	secret, _ := k.key(`,"permissions":["reservations:create","reservations:list","balances:read","events:read"],"scope_filter":["workspace:Prod"]`)
	hk := []string{"X-Cycles-API-Key", secret}
	// A reservation outside the filter, made by the wide key.
	opsRes := k.call("POST", "/v1/reservations", "", wsReserveBody("wide-ops", "ops"), "X-Cycles-API-Key", wide)
	if opsRes.status != 200 {
		t.Fatalf("wide key reserve: %d %s", opsRes.status, opsRes.body)
	}
	opsID := opsRes.obj(t)["reservation_id"].(string)
	prodRes := k.call("POST", "/v1/reservations", "", wsReserveBody("narrow-prod", "prod"), hk...)
	if prodRes.status != 200 {
		t.Fatalf("narrow key reserve in prod: %d %s", prodRes.status, prodRes.body)
	}
	prodID := prodRes.obj(t)["reservation_id"].(string)

	for _, c := range []struct {
		name   string
		http   func() reply
		grpc   func(ctx context.Context) error
		denied bool
		field  string
	}{
		{"reserve inside",
			func() reply { return k.call("POST", "/v1/reservations", "", wsReserveBody("in-h", "prod"), hk...) },
			func(ctx context.Context) error {
				return errtest.ErrOf(k.rt.CreateReservation(ctx, reserveReq("in-g", "prod")))
			},
			false, ""},
		{"reserve outside",
			func() reply { return k.call("POST", "/v1/reservations", "", wsReserveBody("out-h", "ops"), hk...) },
			func(ctx context.Context) error {
				return errtest.ErrOf(k.rt.CreateReservation(ctx, reserveReq("out-g", "ops")))
			},
			true, "subject"},
		{"reserve outside any workspace",
			func() reply { return k.call("POST", "/v1/reservations", "", wsReserveBody("root-h", ""), hk...) },
			func(ctx context.Context) error {
				return errtest.ErrOf(k.rt.CreateReservation(ctx, reserveReq("root-g", "")))
			},
			true, "subject"},
		{"decide outside",
			func() reply {
				return k.call("POST", "/v1/decide", "", `{"idempotency_key":"d","subject":{"workspace":"ops"},"action":{"kind":"k","name":"n"},"estimate":{"unit":"TOKENS","amount":1}}`, hk...)
			},
			func(ctx context.Context) error {
				_, err := k.rt.Decide(ctx, &cyclesv1.DecideRequest{IdempotencyKey: "d", Subject: &cyclesv1.Subject{Workspace: "ops"},
					Action: &cyclesv1.Action{Kind: "k", Name: "n"}, Estimate: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 1}})
				return err
			},
			true, "subject"},
		{"event outside",
			func() reply {
				return k.call("POST", "/v1/events", "", `{"idempotency_key":"e","subject":{"workspace":"ops"},"action":{"kind":"k","name":"n"},"actual":{"unit":"TOKENS","amount":1}}`, hk...)
			},
			func(ctx context.Context) error {
				_, err := k.rt.CreateEvent(ctx, &cyclesv1.CreateEventRequest{IdempotencyKey: "e", Subject: &cyclesv1.Subject{Workspace: "ops"},
					Action: &cyclesv1.Action{Kind: "k", Name: "n"}, Actual: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 1}})
				return err
			},
			true, "subject"},
		{"balances inside",
			func() reply { return k.call("GET", "/v1/balances?workspace=prod", "", "", hk...) },
			func(ctx context.Context) error {
				return errtest.ErrOf(k.rt.GetBalances(ctx, &cyclesv1.GetBalancesRequest{Workspace: "prod"}))
			},
			false, ""},
		{"balances outside",
			func() reply { return k.call("GET", "/v1/balances?workspace=ops", "", "", hk...) },
			func(ctx context.Context) error {
				return errtest.ErrOf(k.rt.GetBalances(ctx, &cyclesv1.GetBalancesRequest{Workspace: "ops"}))
			},
			true, "workspace"},
		{"reservation list of the whole tenant",
			func() reply { return k.call("GET", "/v1/reservations", "", "", hk...) },
			func(ctx context.Context) error {
				return errtest.ErrOf(k.rt.ListReservations(ctx, &cyclesv1.ListReservationsRequest{}))
			},
			true, "workspace"},
		{"reservation list inside",
			func() reply { return k.call("GET", "/v1/reservations?workspace=prod", "", "", hk...) },
			func(ctx context.Context) error {
				return errtest.ErrOf(k.rt.ListReservations(ctx, &cyclesv1.ListReservationsRequest{Workspace: "prod"}))
			},
			false, ""},
		{"reservation get inside",
			func() reply { return k.call("GET", "/v1/reservations/"+prodID, "", "", hk...) },
			func(ctx context.Context) error {
				return errtest.ErrOf(k.rt.GetReservation(ctx, &cyclesv1.GetReservationRequest{ReservationId: prodID}))
			},
			false, ""},
		{"reservation get outside",
			func() reply { return k.call("GET", "/v1/reservations/"+opsID, "", "", hk...) },
			func(ctx context.Context) error {
				return errtest.ErrOf(k.rt.GetReservation(ctx, &cyclesv1.GetReservationRequest{ReservationId: opsID}))
			},
			true, "reservation_id"},
		{"event log outside",
			func() reply {
				return k.call("GET", "/v1/events?scope=tenant:"+k.tenant+"/workspace:ops", "", "", hk...)
			},
			func(ctx context.Context) error {
				return errtest.ErrOf(k.ev.ListEvents(ctx, &cyclesv1.ListEventsRequest{ScopePrefix: "tenant:" + k.tenant + "/workspace:ops"}))
			},
			true, "scope_prefix"},
		{"event log inside",
			func() reply {
				return k.call("GET", "/v1/events?scope=tenant:"+k.tenant+"/workspace:prod", "", "", hk...)
			},
			func(ctx context.Context) error {
				return errtest.ErrOf(k.ev.ListEvents(ctx, &cyclesv1.ListEventsRequest{ScopePrefix: "tenant:" + k.tenant + "/workspace:prod"}))
			},
			false, ""},
		{"event watch outside", nil,
			func(ctx context.Context) error {
				ctx, cancel := context.WithCancel(ctx)
				defer cancel()
				s, err := k.ev.WatchEvents(ctx, &cyclesv1.WatchEventsRequest{ScopePrefix: "tenant:" + k.tenant + "/workspace:ops"})
				if err == nil {
					_, err = s.Recv()
				}
				return err
			},
			true, "scope_prefix"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.http != nil {
				r := c.http()
				switch {
				case c.denied && (r.status != 403 || r.obj(t)["error"] != "FORBIDDEN" || !strings.Contains(string(r.body), "scope_filter")):
					t.Errorf("HTTP: %d %s, want 403 naming scope_filter", r.status, r.body)
				case !c.denied && r.status >= 300:
					t.Errorf("HTTP: %d %s", r.status, r.body)
				}
				if c.denied {
					if d, _ := r.obj(t)["details"].(map[string]any); d["field"] != c.field || d["reason"] != "scope_filter" {
						t.Errorf("HTTP details %v, want field %s", d, c.field)
					}
				}
			}
			err := c.grpc(keyCtx(secret))
			switch {
			case c.denied && (status.Code(err) != codes.PermissionDenied || infoOf(err)["field"] != c.field || infoOf(err)["reason"] != "scope_filter"):
				t.Errorf("gRPC: %v %v, want PERMISSION_DENIED on %s", err, infoOf(err), c.field)
			case !c.denied && err != nil:
				t.Errorf("gRPC: %v", err)
			}
		})
	}
}

// An expired key is refused on both wires from its expires_at on (the
// store's clock), and validation says EXPIRED.
func TestExpiredKeyRefused(t *testing.T) {
	k := newKeysEnv(t)
	now, err := k.c.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	at := now.Add(1500 * time.Millisecond)
	secret, _ := k.key(`,"expires_at":"` + at.UTC().Format(time.RFC3339Nano) + `"`)
	hk := []string{"X-Cycles-API-Key", secret}
	if r := k.call("GET", "/v1/balances?tenant="+k.tenant, "", "", hk...); r.status != 200 {
		t.Fatalf("before expiry: %d %s", r.status, r.body)
	}
	if _, err := k.rt.GetBalances(keyCtx(secret), &cyclesv1.GetBalancesRequest{Tenant: k.tenant}); err != nil {
		t.Fatalf("before expiry over gRPC: %v", err)
	}
	// Wait until the store's clock has passed expires_at.
	for {
		n, err := k.c.Time(context.Background()).Result()
		if err != nil {
			t.Fatal(err)
		}
		if !n.Before(at) {
			break
		}
		time.Sleep(at.Sub(n) + 10*time.Millisecond)
	}
	for _, c := range []struct {
		name string
		http func() reply
		grpc func() error
	}{
		{"balances",
			func() reply { return k.call("GET", "/v1/balances?tenant="+k.tenant, "", "", hk...) },
			func() error {
				return errtest.ErrOf(k.rt.GetBalances(keyCtx(secret), &cyclesv1.GetBalancesRequest{Tenant: k.tenant}))
			}},
		{"reserve",
			func() reply { return k.call("POST", "/v1/reservations", "", wsReserveBody("x", "prod"), hk...) },
			func() error { return errtest.ErrOf(k.rt.CreateReservation(keyCtx(secret), reserveReq("x", "prod"))) }},
		{"introspect",
			func() reply { return k.call("GET", "/v1/auth/introspect", "", "", hk...) },
			func() error { return errtest.ErrOf(k.authn.Introspect(keyCtx(secret), &cyclesv1.IntrospectRequest{})) }},
	} {
		if r := c.http(); r.status != 401 {
			t.Errorf("%s over HTTP after expiry: %d %s", c.name, r.status, r.body)
		}
		if err := c.grpc(); status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s over gRPC after expiry: %v", c.name, err)
		}
	}
	v, err := k.authn.Validate(adminCtx(), &cyclesv1.ValidateRequest{KeySecret: secret})
	if err != nil || v.GetValid() || v.GetReason() != "EXPIRED" {
		t.Fatalf("validate expired key: %v %v", v, err)
	}
}

// PATCH / UpdateApiKey change a key in place and the change governs its very
// next call: permissions, scope filter and expiry; both wires answer the same
// key; a revoked key cannot be changed; the audit trail records the update.
func TestUpdateApiKeyTakesEffect(t *testing.T) {
	k := newKeysEnv(t)
	secret, id := k.key(`,"permissions":["reservations:create","balances:read"]`)
	hk := []string{"X-Cycles-API-Key", secret}
	if r := k.call("POST", "/v1/reservations", "", wsReserveBody("a", "ops"), hk...); r.status != 200 {
		t.Fatalf("reserve before: %d %s", r.status, r.body)
	}
	// Over HTTP: drop reservations:create.
	o := k.must("PATCH", "/v1/admin/api-keys/"+id, `{"permissions":["balances:read"],"description":"read only","metadata":{"team":"x"}}`, 200)
	if ps := o["permissions"].([]any); len(ps) != 1 || ps[0] != "balances:read" || o["description"] != "read only" || o["key_id"] != id {
		t.Fatalf("PATCH answer %v", o)
	}
	r := k.call("POST", "/v1/reservations", "", wsReserveBody("b", "ops"), hk...)
	if r.status != 403 || !strings.Contains(string(r.body), "reservations:create") {
		t.Fatalf("reserve after dropping the permission: %d %s", r.status, r.body)
	}
	if _, err := k.rt.CreateReservation(keyCtx(secret), reserveReq("b", "ops")); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("gRPC reserve after dropping the permission: %v", err)
	}
	// Over gRPC: give it back, narrowed to workspace:prod.
	tenant, keyID, _ := strings.Cut(strings.TrimPrefix(id, k.tenant), "_")
	if tenant != "" {
		t.Fatalf("HTTP key id %q is not <tenant>_<id>", id)
	}
	u, err := k.adm.UpdateApiKey(adminCtx(), &cyclesv1.UpdateApiKeyRequest{TenantId: k.tenant, KeyId: keyID,
		Permissions: &cyclesv1.ApiKeyStrings{Values: []string{"reservations:create"}}, ScopeFilter: &cyclesv1.ApiKeyStrings{Values: []string{"workspace:prod"}}})
	if err != nil || u.GetApiKey().GetScopeFilter()[0] != "workspace:prod" || u.GetApiKey().GetDescription() != "read only" {
		t.Fatalf("UpdateApiKey: %v %v", u, err)
	}
	if _, err := k.rt.CreateReservation(keyCtx(secret), reserveReq("c", "prod")); err != nil {
		t.Fatalf("reserve inside the new filter: %v", err)
	}
	if _, err := k.rt.CreateReservation(keyCtx(secret), reserveReq("d", "ops")); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("reserve outside the new filter: %v", err)
	}
	in, err := k.authn.Introspect(keyCtx(secret), &cyclesv1.IntrospectRequest{})
	if err != nil || len(in.GetScopeFilter()) != 1 || in.GetPermissions()[0] != "reservations:create" {
		t.Fatalf("introspect after update: %v %v", in, err)
	}
	// Validation agrees.
	v := k.must("POST", "/v1/auth/validate", `{"key_secret":"`+secret+`"}`, 200)
	if v["valid"] != true || v["key_id"] != id || v["tenant_id"] != k.tenant || v["scope_filter"].([]any)[0] != "workspace:prod" {
		t.Fatalf("validate: %v", v)
	}
	// Refusals: bad values, no field, unknown key, revoked key.
	for _, c := range []struct {
		path, body string
		want       int
		field      string
	}{
		{id, `{"permissions":["root"]}`, 400, "permissions[0]"},
		{id, `{"scope_filter":["tenant:other"]}`, 400, "scope_filter[0]"},
		{id, `{"expires_at":"2001-01-01T00:00:00Z"}`, 400, "expires_at"},
		{id, `{"status":"REVOKED"}`, 400, ""},
		{id, `{}`, 400, "update"},
		{k.tenant + "_0123456789abcdef", `{"name":"x"}`, 404, ""},
	} {
		r := k.call("PATCH", "/v1/admin/api-keys/"+c.path, "", c.body, k.as...)
		if r.status != c.want {
			t.Errorf("PATCH %s %s: %d %s", c.path, c.body, r.status, r.body)
			continue
		}
		if c.field != "" {
			if d, _ := r.obj(t)["details"].(map[string]any); d["field"] != c.field {
				t.Errorf("PATCH %s: details %v, want field %s", c.body, d, c.field)
			}
		}
	}
	k.must("DELETE", "/v1/admin/api-keys/"+id, "", 200)
	if _, err := k.adm.UpdateApiKey(adminCtx(), &cyclesv1.UpdateApiKeyRequest{TenantId: k.tenant, KeyId: keyID, Name: strPtr("late")}); status.Code(err) != codes.FailedPrecondition && status.Code(err) != codes.Aborted {
		t.Fatalf("update a revoked key: %v", err)
	}
	if r := k.call("PATCH", "/v1/admin/api-keys/"+id, "", `{"name":"late"}`, k.as...); r.status != 409 {
		t.Fatalf("PATCH a revoked key: %d %s", r.status, r.body)
	}
	// Validation of a revoked key is an answer, not an error.
	if v, err := k.authn.Validate(adminCtx(), &cyclesv1.ValidateRequest{KeySecret: secret}); err != nil || v.GetValid() || v.GetReason() != "REVOKED" {
		t.Fatalf("validate revoked: %v %v", v, err)
	}
	if v, err := k.authn.Validate(adminCtx(), &cyclesv1.ValidateRequest{KeySecret: "cyc_x"}); err != nil || v.GetValid() || v.GetReason() != "MALFORMED" {
		t.Fatalf("validate malformed: %v %v", v, err)
	}
	// Only the admin key may validate.
	if _, err := k.authn.Validate(keyCtx(secret), &cyclesv1.ValidateRequest{KeySecret: secret}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("validate with an API key: %v", err)
	}
	// The update is in the audit trail, written by the update script.
	logs := k.must("GET", "/v1/admin/audit/logs?tenant_id="+k.tenant+"&operation=updateApiKey", "", 200)["logs"].([]any)
	if len(logs) < 2 {
		t.Fatalf("audit entries of updateApiKey: %v", logs)
	}
}

func strPtr(v string) *string { return &v }

var _ grpc.ClientConnInterface // keysEnv's clients share the env's connection
