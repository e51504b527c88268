package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/test/redistest"
)

// listAllKeys follows next_cursor to the end.
func (e *env) listAllKeys(req *cyclesv1.ListApiKeysRequest) []*cyclesv1.ApiKey {
	e.t.Helper()
	out, _ := listAll(e, req, e.svc.ListApiKeys, (*cyclesv1.ListApiKeysResponse).GetApiKeys)
	return out
}

func keyIDs(ks []*cyclesv1.ApiKey) []string {
	var ids []string
	for _, k := range ks {
		ids = append(ids, k.GetKeyId())
	}
	return ids
}

// ListApiKeys pages one tenant's keys in key id order, each exactly once and
// exactly as stored (revocations included), filters by status and search
// text, keeps tenants apart, and never lets the stored hash out of Redis.
func TestListApiKeys(t *testing.T) {
	e := newEnv(t)
	a, b := e.createTenant(), e.createTenant()
	want := map[string]*cyclesv1.ApiKey{}
	var revoked, deploy []string
	for i, name := range []string{"ci", "Deploy bot", "ci", "ci", "deploy-2", "ci", "ci"} {
		k := mustCall(t, e.ctx, &cyclesv1.CreateApiKeyRequest{TenantId: a, Name: name}, e.svc.CreateApiKey).GetApiKey()
		want[k.GetKeyId()] = k
		if i%3 == 1 {
			k = mustCall(t, e.ctx, &cyclesv1.RevokeApiKeyRequest{TenantId: a, KeyId: k.GetKeyId()}, e.svc.RevokeApiKey).GetApiKey()
			want[k.GetKeyId()] = k
			revoked = append(revoked, k.GetKeyId())
		}
		if strings.Contains(strings.ToLower(name), "deploy") {
			deploy = append(deploy, k.GetKeyId())
		}
	}
	e.createKey(b)
	sort.Strings(revoked)
	sort.Strings(deploy)

	got := e.listAllKeys(&cyclesv1.ListApiKeysRequest{TenantId: a, Limit: 3})
	ids := keyIDs(got)
	if len(got) != len(want) || !sort.StringsAreSorted(ids) {
		t.Fatalf("listed %v, want the %d keys in id order", ids, len(want))
	}
	for _, k := range got {
		if !proto.Equal(k, want[k.GetKeyId()]) {
			t.Fatalf("listed %v, stored %v", k, want[k.GetKeyId()])
		}
	}
	if ids := keyIDs(e.listAllKeys(&cyclesv1.ListApiKeysRequest{TenantId: a, Status: cyclesv1.ApiKeyStatus_API_KEY_STATUS_REVOKED, Limit: 1})); strings.Join(ids, ",") != strings.Join(revoked, ",") {
		t.Fatalf("revoked: %v, want %v", ids, revoked)
	}
	if ids := keyIDs(e.listAllKeys(&cyclesv1.ListApiKeysRequest{TenantId: a, Search: "DEPLOY", Limit: 1})); strings.Join(ids, ",") != strings.Join(deploy, ",") {
		t.Fatalf("search: %v, want %v", ids, deploy)
	}
	if ids := keyIDs(e.listAllKeys(&cyclesv1.ListApiKeysRequest{TenantId: a, Search: localKeyID(ids[2])[3:11]})); len(ids) != 1 || ids[0] != keyIDs(got)[2] {
		t.Fatalf("search by key id: %v", ids)
	}
	if l := e.listAllKeys(&cyclesv1.ListApiKeysRequest{TenantId: b}); len(l) != 1 || l[0].GetTenantId() != b {
		t.Fatalf("tenant b: %v", l)
	}

	// The script's answer carries public fields only.
	tk := keys.Tenant(a)
	var raw struct {
		Items jsonList[map[string]any] `json:"items"`
	}
	reply, err := e.svc.exec.Run(context.Background(), scriptListAPIKeys.Def, []string{tk.Record(), tk.APIKeys(), tk.APIKey(localKeyID(""))},
		a, "", 100, "", "", 100)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(reply, &raw); err != nil {
		t.Fatal(err)
	}
	if len(raw.Items) != len(want) {
		t.Fatalf("raw items %d", len(raw.Items))
	}
	for _, it := range raw.Items {
		for f := range it {
			switch f {
			case "key_id", "tenant_id", "name", "status", "created_at", "revoked_at", "revoked_reason",
				"permissions", "expires_at", "description", "metadata", "scope_filter", "last_used_at":
			default:
				t.Fatalf("list_api_keys returned field %q", f)
			}
		}
	}

	_, err = call(e.ctx, &cyclesv1.ListApiKeysRequest{TenantId: newTenantID(t)}, e.svc.ListApiKeys)
	wantRefused(t, err, codes.NotFound, apierr.TenantNotFound)
	for _, req := range []*cyclesv1.ListApiKeysRequest{
		{TenantId: "Not A Tenant"},
		{TenantId: a, Cursor: "nope"},
		{TenantId: a, Cursor: "QUJD"},
		{TenantId: a, Limit: -1},
		{TenantId: a, Status: 7},
		{TenantId: a, Search: strings.Repeat("x", 129)},
	} {
		_, err := call(e.ctx, req, e.svc.ListApiKeys)
		wantRefused(t, err, codes.InvalidArgument, apierr.InvalidRequest)
	}
}

// Without tenant_id, ListApiKeys walks every tenant in tenant_id then key id
// order, each key once across pages, skipping registry ids without a record,
// and bounds the tenants one call visits (an empty page with has_more, then
// the rest).
func TestListApiKeysAcrossTenants(t *testing.T) {
	e := newEnvOn(t, redistest.Start(t).Client(t)) // a private registry
	type tk struct{ tenant, key string }
	var want []tk
	var revoked []string
	for _, n := range []int{2, 0, 3} {
		id := e.createTenant()
		for i := 0; i < n; i++ {
			k := e.createKey(id).GetApiKey()
			want = append(want, tk{id, k.GetKeyId()})
			if i == 1 {
				mustCall(t, e.ctx, &cyclesv1.RevokeApiKeyRequest{TenantId: id, KeyId: k.GetKeyId()}, e.svc.RevokeApiKey)
				revoked = append(revoked, k.GetKeyId())
			}
		}
	}
	if err := e.rdb.ZAdd(context.Background(), keys.Tenants, redisZ("t-000000000000")).Err(); err != nil {
		t.Fatal(err)
	}
	sort.Slice(want, func(i, j int) bool {
		if want[i].tenant != want[j].tenant {
			return want[i].tenant < want[j].tenant
		}
		return want[i].key < want[j].key
	})
	var got []tk
	for _, k := range e.listAllKeys(&cyclesv1.ListApiKeysRequest{Limit: 2}) {
		got = append(got, tk{k.GetTenantId(), k.GetKeyId()})
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("listed %v, want %v", got, want)
	}
	sort.Strings(revoked)
	var gotRevoked []string
	for _, k := range e.listAllKeys(&cyclesv1.ListApiKeysRequest{Status: cyclesv1.ApiKeyStatus_API_KEY_STATUS_REVOKED, Limit: 1}) {
		gotRevoked = append(gotRevoked, k.GetKeyId())
	}
	sort.Strings(gotRevoked)
	if !reflect.DeepEqual(gotRevoked, revoked) {
		t.Fatalf("revoked %v, want %v", gotRevoked, revoked)
	}
	// Cursor kinds do not mix.
	one := mustCall(t, e.ctx, &cyclesv1.ListApiKeysRequest{Limit: 1}, e.svc.ListApiKeys)
	_, err := call(e.ctx, &cyclesv1.ListApiKeysRequest{TenantId: want[0].tenant, Cursor: one.GetNextCursor()}, e.svc.ListApiKeys)
	wantRefused(t, err, codes.InvalidArgument, apierr.InvalidRequest)

	// 101 key-less tenants ahead of one with a key ("t-" ids sort after "a-").
	for i := 0; i < walkTenantsPerCall+1; i++ {
		mustCall(t, e.ctx, &cyclesv1.CreateTenantRequest{TenantId: fmt.Sprintf("a-%03d", i), Name: "empty"}, e.svc.CreateTenant)
	}
	first := mustCall(t, e.ctx, &cyclesv1.ListApiKeysRequest{}, e.svc.ListApiKeys)
	if len(first.GetApiKeys()) != 0 || !first.GetHasMore() {
		t.Fatalf("first call after %d empty tenants: %v", walkTenantsPerCall, first)
	}
	if all := e.listAllKeys(&cyclesv1.ListApiKeysRequest{}); len(all) != len(want) {
		t.Fatalf("after the empty tenants: %d keys, want %d", len(all), len(want))
	}
}
