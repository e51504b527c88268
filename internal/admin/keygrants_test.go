package admin

import (
	"context"
	"reflect"
	"strconv"
	"testing"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/permission"
)

// What a key carries reaches the principal: the permissions granted, the
// default set when none were, and for a key stored before permissions
// existed (no permissions field) exactly the access it had.
func TestKeyPermissionsReachThePrincipal(t *testing.T) {
	e := newEnv(t)
	id := e.createTenant()
	for _, c := range []struct {
		name   string
		grant  []string
		legacy bool
		want   []string
	}{
		{"granted", []string{"balances:read", "events:read"}, false, []string{"balances:read", "events:read"}},
		{"default", nil, false, permission.Default},
		{"stored before permissions", nil, true, permission.Legacy},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp := mustCall(t, e.ctx, &cyclesv1.CreateApiKeyRequest{TenantId: id, Name: c.name, Permissions: c.grant}, e.svc.CreateApiKey)
			if c.legacy {
				e.rdb.HDel(context.Background(), keys.Tenant(id).APIKey(localKeyID(resp.GetApiKey().GetKeyId())), "permissions")
			}
			p, err := e.svc.VerifyAPIKey(context.Background(), resp.GetSecret())
			if err != nil || !reflect.DeepEqual(p.Permissions, c.want) {
				t.Fatalf("principal %+v, %v; want permissions %v", p, err, c.want)
			}
			l := mustCall(t, e.ctx, &cyclesv1.ListApiKeysRequest{TenantId: id, Search: c.name}, e.svc.ListApiKeys)
			if len(l.GetApiKeys()) != 1 || !reflect.DeepEqual(l.GetApiKeys()[0].GetPermissions(), c.want) {
				t.Fatalf("listed %v", l.GetApiKeys())
			}
		})
	}
}

// An expired key is refused: expires_at is compared with Redis TIME in the
// verify script's answer, not with any client's clock.
func TestExpiredKeyIsRefused(t *testing.T) {
	e := newEnv(t)
	id := e.createTenant()
	far := int64(32_503_680_000_000) // year 3000
	resp := mustCall(t, e.ctx, &cyclesv1.CreateApiKeyRequest{TenantId: id, Name: "exp", ExpiresAtMs: &far}, e.svc.CreateApiKey)
	if resp.GetApiKey().GetExpiresAtMs() != far {
		t.Fatalf("key %v", resp.GetApiKey())
	}
	if p, err := e.svc.VerifyAPIKey(context.Background(), resp.GetSecret()); err != nil || p.ExpiresAtMs != far {
		t.Fatalf("before expiry: %+v %v", p, err)
	}
	// Move expires_at to the store's present, then verify on a replica with
	// no cached verification.
	ctx := context.Background()
	now, err := e.rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	e.rdb.HSet(ctx, keys.Tenant(id).APIKey(localKeyID(resp.GetApiKey().GetKeyId())), "expires_at", strconv.FormatInt(now.UnixMilli(), 10))
	other := newEnvOn(t, e.rdb)
	if _, err := other.svc.VerifyAPIKey(ctx, resp.GetSecret()); !apierr.HasCode(err, apierr.Unauthorized) {
		t.Fatalf("expired key: %v", err)
	}
	past := now.UnixMilli() - 1
	_, err = call(e.ctx, &cyclesv1.CreateApiKeyRequest{TenantId: id, Name: "late", ExpiresAtMs: &past}, e.svc.CreateApiKey)
	if !apierr.HasCode(err, apierr.InvalidRequest) {
		t.Fatalf("create with a past expiry: %v", err)
	}
}
