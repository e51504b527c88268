package audit_test

import (
	"context"
	"encoding/json"
	"io/fs"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/audit"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/lua"
	"github.com/cyclesgo/cycles-go/test/grpctest"
	"github.com/cyclesgo/cycles-go/test/redistest"
	"github.com/cyclesgo/cycles-go/test/scripttest"
)

// The HTTP wire records the same entries (its calls run through the same
// chain), with the HTTP status it answered; an admin-key release of a
// tenant's reservation is recorded, a tenant's own release is not; the
// listing answers the spec's shape.
func TestHTTPWireAudit(t *testing.T) {
	e := start(t, audit.Options{})
	f := &fx{e: e, tenant: e.tenant()}
	as := func(rid string) []string {
		return []string{"X-Admin-API-Key", grpctest.AdminKey, "X-Request-Id", rid, "User-Agent", "http-audit-test/1"}
	}
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		op, tenant, code         string
	}{
		{"create tenant", "POST", "/v1/admin/tenants", `{"tenant_id":"` + f.tenant + `-h","name":"h"}`, 201, "createTenant", f.tenant + "-h", ""},
		{"duplicate tenant", "POST", "/v1/admin/tenants", `{"tenant_id":"` + f.tenant + `","name":"h"}`, 409, "createTenant", f.tenant, "DUPLICATE_RESOURCE"},
		{"freeze", "POST", "/v1/admin/budgets/freeze?scope=" + url.QueryEscape(f.scope("")) + "&unit=TOKENS&tenant_id=" + f.tenant,
			`{"reason":"r"}`, 200, "freezeBudget", f.tenant, ""},
		{"malformed body", "POST", "/v1/admin/budgets/fund?scope=" + url.QueryEscape(f.scope("")) + "&unit=TOKENS&tenant_id=" + f.tenant,
			`{"operation":`, 400, "fundBudget", audit.AdminTenant, "INVALID_REQUEST"}, // no body, no tenant
	} {
		t.Run(tc.name, func(t *testing.T) {
			rid := newRequestID(t)
			r := e.call(tc.method, tc.path, tc.body, as(rid)...)
			if r.status != tc.status {
				t.Fatalf("%d %s, want %d", r.status, r.body, tc.status)
			}
			got := e.httpEntries(t, "request_id="+rid)
			if len(got) != 1 {
				t.Fatalf("%d entries, want 1: %v", len(got), got)
			}
			g := got[0]
			if g["operation"] != tc.op || g["status"] != json.Number(strconv.Itoa(tc.status)) || g["tenant_id"] != tc.tenant ||
				g["source_ip"] != "127.0.0.1" || g["user_agent"] != "http-audit-test/1" || g["request_id"] != rid {
				t.Errorf("entry %v", g)
			}
			if code, _ := g["error_code"].(string); code != tc.code {
				t.Errorf("error_code %q, want %q", code, tc.code)
			}
		})
	}

	// Releases: the tenant's own is not audited, the admin's on its behalf is.
	for _, onBehalf := range []bool{false, true} {
		ctx := grpctest.AsTenant(context.Background(), f.tenant)
		f.setup(func(context.Context) error { // unfreeze for the reserve
			_, err := e.adm.UnfreezeBudget(adminCtx(newRequestID(t)), &cyclesv1.UnfreezeBudgetRequest{TenantId: f.tenant, ScopePath: f.scope(""), Unit: cyclesv1.Unit_UNIT_TOKENS})
			if code, _, _ := apierr.FromStatus(err); code == apierr.InvalidState {
				return nil
			}
			return err
		})
		r, err := e.rt.CreateReservation(ctx, &cyclesv1.CreateReservationRequest{IdempotencyKey: "rel-" + strconv.FormatBool(onBehalf),
			Subject: &cyclesv1.Subject{Tenant: f.tenant}, Action: &cyclesv1.Action{Kind: "llm.completion", Name: "m"},
			Estimate: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 5}})
		if err != nil {
			t.Fatal(err)
		}
		rid := newRequestID(t)
		hdr := []string{"X-Cycles-API-Key", grpctest.APIKey(f.tenant), "X-Request-Id", rid}
		if onBehalf {
			hdr = as(rid)
		}
		if rr := e.call("POST", "/v1/reservations/"+r.GetReservationId()+"/release", `{"idempotency_key":"rk"}`, hdr...); rr.status != 200 {
			t.Fatalf("release (on behalf %v): %d %s", onBehalf, rr.status, rr.body)
		}
		got := e.entries(rid)
		switch {
		case !onBehalf && len(got) != 0:
			t.Errorf("a tenant's own release was audited: %v", got)
		case onBehalf && (len(got) != 1 || got[0].GetOperation() != "releaseReservation" ||
			got[0].GetTenantId() != f.tenant || got[0].GetResourceId() != r.GetReservationId() || got[0].GetStatus() != 200):
			t.Errorf("admin release on behalf: entries %v", got)
		}
	}
}

// httpEntries lists entries over HTTP with query q (admin key), checking the
// envelope's shape.
func (e *env) httpEntries(t *testing.T, q string) []map[string]any {
	t.Helper()
	r := e.call("GET", "/v1/admin/audit/logs?limit=200&"+q, "", "X-Admin-API-Key", grpctest.AdminKey)
	if r.status != 200 {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	m := r.obj(t)
	if _, ok := m["has_more"].(bool); !ok {
		t.Fatalf("list without has_more: %v", m)
	}
	var out []map[string]any
	for _, l := range m["logs"].([]any) {
		out = append(out, l.(map[string]any))
	}
	return out
}

// No API alters or deletes an entry: no script but lib/audit.lua and
// read-only ones (flags=no-writes) names an audit stream, and it only appends (XADD, with the MINID age trim); the
// listing route has no write method; and every entry written before a run of
// every mutation (successes and refusals) is still there, byte for byte.
func TestEntriesCannotBeChanged(t *testing.T) {
	auditKey := regexp.MustCompile(`'audit'|:audit|\{audit\}`)
	writes := regexp.MustCompile(`'(XDEL|XTRIM|DEL|UNLINK|XSETID|RENAME|HSET|SET|EXPIRE|PEXPIRE)'`)
	err := fs.WalkDir(lua.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".lua") {
			return err
		}
		b, err := fs.ReadFile(lua.FS, path)
		if err != nil {
			return err
		}
		src := string(b)
		switch path {
		case "lib/audit.lua":
			if w := writes.FindString(src); w != "" {
				t.Errorf("lib/audit.lua calls %s: it may only append", w)
			}
		case "audit/auth_refused.lua": // its own per-minute counters only
		default:
			if strings.HasPrefix(src, "#!lua flags=no-writes") {
				break // a reader (the archiver's copy): Redis refuses any write from it
			}
			if auditKey.MatchString(src) && !strings.HasPrefix(path, "audit/") {
				t.Errorf("%s names an audit key outside lib/audit.lua", path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	e := start(t, audit.Options{})
	f := &fx{e: e, tenant: e.tenant(), lenient: true}
	for _, m := range mutations {
		_, _, _ = m.ok(adminCtx(newRequestID(t)), f)
	}
	ctx := context.Background()
	before := e.c.XRange(ctx, keys.Tenant(f.tenant).Audit(), "-", "+").Val()
	if len(before) < 5 {
		t.Fatalf("only %d entries to protect", len(before))
	}
	for _, m := range mutations {
		_, _, _ = m.ok(adminCtx(newRequestID(t)), f)
		if m.refuse != nil {
			_, _, _ = m.refuse(adminCtx(newRequestID(t)), f)
		}
	}
	for _, method := range []string{"POST", "PUT", "PATCH", "DELETE"} {
		if r := e.call(method, "/v1/admin/audit/logs", `{}`, "X-Admin-API-Key", grpctest.AdminKey); r.status < 400 {
			t.Errorf("%s /v1/admin/audit/logs answered %d", method, r.status)
		}
	}
	after := e.c.XRange(ctx, keys.Tenant(f.tenant).Audit(), "-", "+").Val()
	if len(after) <= len(before) {
		t.Fatalf("the second run appended nothing (%d -> %d entries)", len(before), len(after))
	}
	for i, m := range before {
		a := after[i]
		if a.ID != m.ID || !equalValues(a.Values, m.Values) {
			t.Fatalf("entry %d changed: %v -> %v", i, m, a)
		}
	}
}

func equalValues(a, b map[string]any) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// Paging through a tenant's entries and through the merge of every stream
// sees each entry once, newest first; the spec's filters select; bad
// combinations are INVALID_REQUEST.
func TestListPagingAndFilters(t *testing.T) {
	e := start(t, audit.Options{})
	f := &fx{e: e, tenant: e.tenant()}
	budget := budgetID(f.scope(""))
	for i := 0; i < 5; i++ {
		_, err := e.adm.FundBudget(adminCtx(newRequestID(t)), &cyclesv1.FundBudgetRequest{TenantId: f.tenant, ScopePath: f.scope(""),
			Unit: cyclesv1.Unit_UNIT_TOKENS, Operation: cyclesv1.FundingOperation_FUNDING_OPERATION_CREDIT, Amount: 1, IdempotencyKey: "p-" + strconv.Itoa(i)})
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 2; i++ {
		_, err := e.adm.FreezeBudget(adminCtx(newRequestID(t)), &cyclesv1.FreezeBudgetRequest{TenantId: f.tenant, ScopePath: f.scope(""), Unit: cyclesv1.Unit_UNIT_TOKENS})
		if code, _, _ := apierr.FromStatus(err); i == 1 && code != apierr.BudgetFrozen {
			t.Fatalf("second freeze: %v", err)
		}
	}
	page := func(req *cyclesv1.ListAuditLogsRequest) []*cyclesv1.AuditLogEntry {
		t.Helper()
		var all []*cyclesv1.AuditLogEntry
		seen := map[string]bool{}
		for n := 0; ; n++ {
			resp, err := e.aud.ListAuditLogs(adminCtx(newRequestID(t)), req)
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range resp.GetLogs() {
				if seen[l.GetLogId()] {
					t.Fatalf("entry %s listed twice", l.GetLogId())
				}
				seen[l.GetLogId()] = true
				if k := len(all); k > 0 && all[k-1].GetTimestampMs() < l.GetTimestampMs() {
					t.Fatalf("entries not newest first: %v then %v", all[k-1], l)
				}
				all = append(all, l)
			}
			if !resp.GetHasMore() {
				return all
			}
			if n > 50 {
				t.Fatal("listing does not end")
			}
			req.Cursor = resp.GetNextCursor()
		}
	}
	for _, tc := range []struct {
		name string
		req  *cyclesv1.ListAuditLogsRequest
		want int
	}{
		{"tenant, pages of 2", &cyclesv1.ListAuditLogsRequest{TenantId: f.tenant, Limit: 2}, 7},
		{"every stream, pages of 3", &cyclesv1.ListAuditLogsRequest{ResourceId: budget, Limit: 3}, 7},
		{"refusals", &cyclesv1.ListAuditLogsRequest{TenantId: f.tenant, StatusMin: ptr(int32(400))}, 1},
		{"exact status", &cyclesv1.ListAuditLogsRequest{TenantId: f.tenant, Status: ptr(int32(200))}, 6},
		{"error code", &cyclesv1.ListAuditLogsRequest{TenantId: f.tenant, ErrorCodes: []string{"BUDGET_FROZEN", "NOPE"}}, 1},
		{"error code excluded", &cyclesv1.ListAuditLogsRequest{TenantId: f.tenant, ErrorCodesExclude: []string{"BUDGET_FROZEN"}}, 6},
		{"operations", &cyclesv1.ListAuditLogsRequest{TenantId: f.tenant, Operations: []string{"freezeBudget"}}, 2},
		{"resource type", &cyclesv1.ListAuditLogsRequest{TenantId: f.tenant, ResourceTypes: []string{"tenant"}}, 0},
		{"search", &cyclesv1.ListAuditLogsRequest{TenantId: f.tenant, Search: "FUNDBUD"}, 5},
		{"sentinel stream", &cyclesv1.ListAuditLogsRequest{TenantId: audit.AdminTenant, ResourceId: budget}, 0},
	} {
		if got := page(tc.req); len(got) != tc.want {
			t.Errorf("%s: %d entries, want %d", tc.name, len(got), tc.want)
		}
	}
	for _, bad := range []*cyclesv1.ListAuditLogsRequest{
		{Status: ptr(int32(200)), StatusMin: ptr(int32(100))},
		{StatusMin: ptr(int32(99))},
		{StatusMin: ptr(int32(500)), StatusMax: ptr(int32(400))},
		{Operations: make([]string, 26)},
		{Search: strings.Repeat("s", 129)},
		{Cursor: "not-a-cursor"},
	} {
		if _, err := e.aud.ListAuditLogs(adminCtx(newRequestID(t)), bad); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%v: %v, want INVALID_ARGUMENT", bad, err)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// Refused authentications are counted per peer and minute; entries are
// written for a peer's 1st, 10th, 100th refusal of a minute only, and the
// peers counted apart are bounded. Also end to end: a bad key over gRPC is
// recorded under __unauth__ with its address.
func TestAuthRefusalsAggregated(t *testing.T) {
	for _, be := range redistest.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			ex := scripttest.New(t, be)
			svc := audit.New(ex, audit.Options{AuthFailPeers: 2})
			peer := "198.51.100." + strconv.Itoa(len(be.Name))
			refused := apierr.New(apierr.Unauthorized, "unknown API key")
			for i := 0; i < 100; i++ {
				svc.AuthRefused(context.Background(), peer, refused)
			}
			for i := 0; i < 5; i++ {
				svc.AuthRefused(context.Background(), "203.0.113."+strconv.Itoa(i), refused)
			}
			ctx := context.Background()
			n := 0
			for _, m := range be.Client.XRange(ctx, keys.AuditLog, "-", "+").Val() {
				if md, _ := m.Values["md"].(string); strings.Contains(md, `"peer":"`+peer+`"`) {
					n++
					if m.Values["t"] != audit.UnauthTenant || m.Values["ec"] != "UNAUTHORIZED" || m.Values["st"] != "401" {
						t.Errorf("entry %v", m.Values)
					}
				}
			}
			// 1st, 10th, 100th in one minute; a minute boundary during the
			// loop splits the count (at most 1, 10 and 1, 10: 4 entries).
			if n < 2 || n > 4 {
				t.Errorf("%d entries for 100 refusals of one peer, want 2..4", n)
			}
			total := int64(0)
			for _, k := range be.Client.Keys(ctx, keys.AuthFailPrefix+"*").Val() {
				fields := be.Client.HGetAll(ctx, k).Val()
				if len(fields) > 3 {
					t.Errorf("%s counts %d peers, bound is 2 + '*'", k, len(fields))
				}
				for _, v := range fields {
					c, _ := strconv.ParseInt(v, 10, 64)
					total += c
				}
			}
			if be.Name == "embedded" && total != 105 {
				t.Errorf("counted %d refusals, want 105", total)
			}
		})
	}

	e := startOn(t, redistest.Embedded(t), audit.Options{})
	rid := newRequestID(t)
	ctx := metadata.AppendToOutgoingContext(context.Background(), auth.APIKeyHeader, "not-a-key", auth.RequestIDHeader, rid)
	if _, err := e.rt.GetBalances(ctx, &cyclesv1.GetBalancesRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("bad key: %v", err)
	}
	got := e.entries(rid)
	if len(got) != 1 || got[0].GetTenantId() != audit.UnauthTenant || got[0].GetSourceIp() != "127.0.0.1" ||
		got[0].GetOperation() != "authenticate" || got[0].GetStatus() != 401 {
		t.Fatalf("refused authentication entries %v", got)
	}
}
