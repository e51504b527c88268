package admin

import (
	"context"
	"slices"
	"testing"
	"time"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/keys"
)

// A permission change on one replica governs the key on another replica at
// once (its next verification after the invalidation), although that replica
// would trust its cache for an hour.
func TestPermissionChangeReachesOtherReplicas(t *testing.T) {
	a, b, tenant, k := twoReplicas(t)
	ctx := context.Background()
	p, err := b.svc.VerifyAPIKey(ctx, k.GetSecret())
	if err != nil || !slices.Contains(p.Permissions, "reservations:create") {
		t.Fatalf("before: %v %v", p, err)
	}
	mustCall(t, a.ctx, &cyclesv1.UpdateApiKeyRequest{TenantId: tenant, KeyId: k.GetApiKey().GetKeyId(),
		Permissions: &cyclesv1.ApiKeyStrings{Values: []string{"balances:read"}},
		ScopeFilter: &cyclesv1.ApiKeyStrings{Values: []string{"workspace:Prod"}}}, a.svc.UpdateApiKey)
	for i := 0; ; i++ {
		p, err = b.svc.VerifyAPIKey(ctx, k.GetSecret())
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(p.Permissions, "reservations:create") {
			break
		}
		if i > 300 {
			t.Fatal("replica b still grants the dropped permission")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !slices.Equal(p.ScopeFilter, []string{"workspace:prod"}) {
		t.Fatalf("scope filter on b: %q", p.ScopeFilter)
	}
}

// The stored record after an update: only the fields given change, an empty
// list is kept as empty (it grants nothing), an empty map removes labels.
func TestUpdateApiKeyFields(t *testing.T) {
	e := newEnv(t)
	tenant := e.createTenant()
	k := mustCall(t, e.ctx, &cyclesv1.CreateApiKeyRequest{TenantId: tenant, Name: "n", Description: "d",
		Metadata: map[string]string{"a": "b"}, ScopeFilter: []string{"agent:*"}}, e.svc.CreateApiKey)
	id := k.GetApiKey().GetKeyId()
	if !slices.Equal(k.GetApiKey().GetScopeFilter(), []string{"agent:*"}) {
		t.Fatalf("created scope filter %q", k.GetApiKey().GetScopeFilter())
	}
	u := mustCall(t, e.ctx, &cyclesv1.UpdateApiKeyRequest{TenantId: tenant, KeyId: id, Name: strPtr("m"),
		Permissions: &cyclesv1.ApiKeyStrings{}, Metadata: &cyclesv1.ApiKeyLabels{}, ScopeFilter: &cyclesv1.ApiKeyStrings{}}, e.svc.UpdateApiKey).GetApiKey()
	if u.GetName() != "m" || u.GetDescription() != "d" || len(u.GetPermissions()) != 0 ||
		len(u.GetMetadata()) != 0 || len(u.GetScopeFilter()) != 0 {
		t.Fatalf("updated %v", u)
	}
	if got := e.rdb.HGet(context.Background(), keys.Tenant(tenant).APIKey(localKeyID(id)), "permissions").Val(); got != "[]" {
		t.Fatalf("stored permissions %q, want [] (not absent: absent is the legacy set)", got)
	}
	if p, err := e.svc.VerifyAPIKey(context.Background(), k.GetSecret()); err != nil || len(p.Permissions) != 0 {
		t.Fatalf("verify after emptying permissions: %v %v", p, err)
	}
}

// last_used_at is written off the request path by RunKeyTouches, at most
// once a minute per key: a second use within the minute writes nothing.
func TestLastUsedAt(t *testing.T) {
	e := newEnv(t)
	runUntilCleanup(t, "key touches", e.svc.RunKeyTouches)
	tenant := e.createTenant()
	k := e.createKey(tenant)
	hk := keys.Tenant(tenant).APIKey(localKeyID(k.GetApiKey().GetKeyId()))
	if k.GetApiKey().LastUsedAtMs != nil {
		t.Fatal("a new key has a last_used_at")
	}
	if _, err := e.svc.VerifyAPIKey(context.Background(), k.GetSecret()); err != nil {
		t.Fatal(err)
	}
	var first string
	for i := 0; first == ""; i++ {
		if i > 500 {
			t.Fatal("last_used_at never written")
		}
		time.Sleep(10 * time.Millisecond)
		first = e.rdb.HGet(context.Background(), hk, "last_used_at").Val()
	}
	// Within the minute: this replica does not queue it, and the script
	// would not write it for another replica either.
	e.svc.touches.mu.Lock()
	clear(e.svc.touches.last) // as if another replica asked
	e.svc.touches.mu.Unlock()
	if _, err := e.svc.VerifyAPIKey(context.Background(), k.GetSecret()); err != nil {
		t.Fatal(err)
	}
	var wrote bool
	if err := e.svc.exec.RunInto(context.Background(), &wrote, scriptTouchAPIKey.Def, []string{hk}); err != nil || wrote {
		t.Fatalf("a second touch within the minute wrote: %v %v", wrote, err)
	}
	if got := e.rdb.HGet(context.Background(), hk, "last_used_at").Val(); got != first {
		t.Fatalf("last_used_at moved within the minute: %s -> %s", first, got)
	}
	l := mustCall(t, e.ctx, &cyclesv1.ListApiKeysRequest{TenantId: tenant}, e.svc.ListApiKeys)
	if l.GetApiKeys()[0].LastUsedAtMs == nil {
		t.Fatalf("listed key has no last_used_at: %v", l.GetApiKeys()[0])
	}
}

func strPtr(s string) *string { return &s }

// api_key.permissions_changed is appended by the update that changes a
// key's permissions or scope filter, naming which, and by no other update.
func TestPermissionsChangedEvent(t *testing.T) {
	e := newEnv(t)
	tenant := e.createTenant()
	k := e.createKey(tenant)
	id := k.GetApiKey().GetKeyId()
	for _, c := range []struct {
		name string
		req  *cyclesv1.UpdateApiKeyRequest
		want []string // changed_fields of the event, nil: no event
	}{
		{"name only", &cyclesv1.UpdateApiKeyRequest{Name: strPtr("renamed")}, nil},
		{"permissions", &cyclesv1.UpdateApiKeyRequest{Permissions: &cyclesv1.ApiKeyStrings{Values: []string{"balances:read"}}},
			[]string{"permissions"}},
		{"same permissions again", &cyclesv1.UpdateApiKeyRequest{Permissions: &cyclesv1.ApiKeyStrings{Values: []string{"balances:read"}}}, nil},
		{"both", &cyclesv1.UpdateApiKeyRequest{Permissions: &cyclesv1.ApiKeyStrings{Values: []string{"reservations:list"}},
			ScopeFilter: &cyclesv1.ApiKeyStrings{Values: []string{"agent:*"}}}, []string{"permissions", "scope_filter"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := len(e.events(tenant))
			c.req.TenantId, c.req.KeyId = tenant, id
			mustCall(t, e.ctx, c.req, e.svc.UpdateApiKey)
			evs := e.events(tenant)[before:]
			if c.want == nil {
				if len(evs) != 0 {
					t.Fatalf("events %v, want none", eventTypes(evs))
				}
				return
			}
			if len(evs) != 1 || evs[0].Type != "api_key.permissions_changed" {
				t.Fatalf("events %v, want one api_key.permissions_changed", eventTypes(evs))
			}
			var got []string
			for _, f := range evs[0].Data["changed_fields"].([]any) {
				got = append(got, f.(string))
			}
			if !slices.Equal(got, c.want) || evs[0].Data["key_id"] != id {
				t.Fatalf("data %v, want changed_fields %v and key_id %s", evs[0].Data, c.want, id)
			}
		})
	}
}
