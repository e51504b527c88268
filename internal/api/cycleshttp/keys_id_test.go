package cycleshttp_test

import (
	"regexp"
	"testing"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
)

// A key has one id on both wires: "<tenant>_<16 hex>" in every answer that
// names it (create, list, update, revoke, validate, introspect, audit entries
// as actor and as resource), whichever wire created it; requests accept it,
// and the gRPC ones that carry tenant_id also the 16 hex alone.
func TestKeyIDSameOnBothWires(t *testing.T) {
	k := newKeysEnv(t)
	aud := cyclesv1.NewAuditServiceClient(k.conn)
	shape := regexp.MustCompile(`^` + regexp.QuoteMeta(k.tenant) + `_[0-9a-f]{16}$`)

	secretH, idH := k.key("")
	g, err := k.adm.CreateApiKey(adminCtx(), &cyclesv1.CreateApiKeyRequest{TenantId: k.tenant, Name: "g"})
	if err != nil {
		t.Fatal(err)
	}
	secretG, idG := g.GetSecret(), g.GetApiKey().GetKeyId()

	for _, c := range []struct {
		name, secret, id string
	}{{"created over HTTP", secretH, idH}, {"created over gRPC", secretG, idG}} {
		t.Run(c.name, func(t *testing.T) {
			if !shape.MatchString(c.id) {
				t.Fatalf("key id %q, want <tenant>_<16 hex>", c.id)
			}
			local := c.id[len(k.tenant)+1:]
			// httpIDs is the member of each item of the list an HTTP GET of path answers.
			httpIDs := func(path, list, member string) []string {
				var ids []string
				for _, it := range k.must("GET", path, "", 200)[list].([]any) {
					ids = append(ids, it.(map[string]any)[member].(string))
				}
				return ids
			}
			// auditIDs is the member of the entries the audit log lists with
			// member=c.id on HTTP, then id of those req lists on gRPC.
			auditIDs := func(member string, req *cyclesv1.ListAuditLogsRequest, id func(*cyclesv1.AuditLogEntry) string) []string {
				ids := httpIDs("/v1/admin/audit/logs?"+member+"="+c.id, "logs", member)
				l, err := aud.ListAuditLogs(adminCtx(), req)
				if err != nil {
					t.Fatal(err)
				}
				for _, it := range l.GetLogs() {
					ids = append(ids, id(it))
				}
				return ids
			}
			// A mutation made by the key itself, so it is an audit entry's actor.
			k.call("POST", "/v1/admin/budgets", "", `{"scope":"tenant:`+k.tenant+`/workspace:w-`+local+`","unit":"TOKENS","allocated":{"unit":"TOKENS","amount":1}}`,
				"X-Cycles-API-Key", c.secret)
			for _, row := range []struct {
				name string
				got  func() []string // the ids the call answered with
			}{
				{"list", func() []string {
					ids := httpIDs("/v1/admin/api-keys?tenant_id="+k.tenant, "keys", "key_id")
					l, err := k.adm.ListApiKeys(adminCtx(), &cyclesv1.ListApiKeysRequest{TenantId: k.tenant})
					if err != nil {
						t.Fatal(err)
					}
					for _, it := range l.GetApiKeys() {
						ids = append(ids, it.GetKeyId())
					}
					return only(ids, c.id)
				}},
				{"search by the id", func() []string {
					l, err := k.adm.ListApiKeys(adminCtx(), &cyclesv1.ListApiKeysRequest{TenantId: k.tenant, Search: c.id})
					if err != nil || len(l.GetApiKeys()) != 1 {
						t.Fatalf("search %s: %v %v", c.id, l, err)
					}
					h := k.must("GET", "/v1/admin/api-keys?tenant_id="+k.tenant+"&search="+c.id, "", 200)["keys"].([]any)
					if len(h) != 1 {
						t.Fatalf("HTTP search %s: %v", c.id, h)
					}
					return []string{l.GetApiKeys()[0].GetKeyId(), h[0].(map[string]any)["key_id"].(string)}
				}},
				{"update", func() []string {
					h := k.must("PATCH", "/v1/admin/api-keys/"+c.id, `{"description":"d"}`, 200)
					byPublic, err := k.adm.UpdateApiKey(adminCtx(), &cyclesv1.UpdateApiKeyRequest{TenantId: k.tenant, KeyId: c.id, Description: strPtr("e")})
					if err != nil {
						t.Fatal(err)
					}
					byLocal, err := k.adm.UpdateApiKey(adminCtx(), &cyclesv1.UpdateApiKeyRequest{TenantId: k.tenant, KeyId: local, Description: strPtr("f")})
					if err != nil {
						t.Fatal(err)
					}
					return []string{h["key_id"].(string), byPublic.GetApiKey().GetKeyId(), byLocal.GetApiKey().GetKeyId()}
				}},
				{"validate", func() []string {
					h := k.must("POST", "/v1/auth/validate", `{"key_secret":"`+c.secret+`"}`, 200)
					v, err := k.authn.Validate(adminCtx(), &cyclesv1.ValidateRequest{KeySecret: c.secret})
					if err != nil {
						t.Fatal(err)
					}
					return []string{h["key_id"].(string), v.GetKeyId()}
				}},
				{"introspect", func() []string {
					h := k.call("GET", "/v1/auth/introspect", "", "", "X-Cycles-API-Key", c.secret)
					in, err := k.authn.Introspect(keyCtx(c.secret), &cyclesv1.IntrospectRequest{})
					if err != nil || h.status != 200 {
						t.Fatalf("introspect: %d %s / %v", h.status, h.body, err)
					}
					return []string{h.obj(t)["key_id"].(string), in.GetKeyId()}
				}},
				{"audit entries: actor", func() []string {
					return auditIDs("key_id", &cyclesv1.ListAuditLogsRequest{KeyId: c.id}, (*cyclesv1.AuditLogEntry).GetKeyId)
				}},
				{"audit entries: resource", func() []string {
					return auditIDs("resource_id", &cyclesv1.ListAuditLogsRequest{ResourceId: c.id}, (*cyclesv1.AuditLogEntry).GetResourceId)
				}},
				{"revoke", func() []string {
					h := k.must("DELETE", "/v1/admin/api-keys/"+c.id, "", 200)
					r, err := k.adm.RevokeApiKey(adminCtx(), &cyclesv1.RevokeApiKeyRequest{TenantId: k.tenant, KeyId: c.id})
					if err != nil {
						t.Fatal(err)
					}
					return []string{h["key_id"].(string), r.GetApiKey().GetKeyId()}
				}},
			} {
				got := row.got()
				if len(got) < 2 {
					t.Errorf("%s: answered %q, want the id on both wires", row.name, got)
				}
				for _, id := range got {
					if id != c.id {
						t.Errorf("%s: answered %q, want %q", row.name, id, c.id)
					}
				}
			}
		})
	}
}

// only returns the ids in ids equal to id (a listing holds other keys too).
func only(ids []string, id string) []string {
	var out []string
	for _, v := range ids {
		if v == id {
			out = append(out, v)
		}
	}
	return out
}
