package policy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/admin"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/ledger"
	"github.com/cyclesgo/cycles-go/internal/policy"
	"github.com/cyclesgo/cycles-go/internal/validate"
	"github.com/cyclesgo/cycles-go/test/errtest"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
	"github.com/cyclesgo/cycles-go/test/redistest"
	"github.com/cyclesgo/cycles-go/test/scripttest"
)

// env is one tenant with budgets at tenant, workspace:prod and
// workspace:prod/agent:bot (1,000,000 TOKENS each), on the shared redis-server.
type env struct {
	t      *testing.T
	ctx    context.Context
	rdb    redis.UniversalClient
	adm    *admin.Service
	led    *ledger.Ledger
	pol    *policy.Service
	tenant string
}

func newEnv(t *testing.T) *env { return newEnvOn(t, redistest.SharedClient(t)) }

func newEnvOn(t *testing.T, rdb redis.UniversalClient) *env {
	return newEnvFor(t, redistest.BackendOn(t, rdb))
}

// newEnvFor builds the services on one leg of redistest.Backends, their
// scripts sent the way production sends them on that backend.
func newEnvFor(t *testing.T, be redistest.Backend) *env {
	t.Helper()
	rdb := be.Client
	exec := scripttest.New(t, be)
	e := &env{t: t, ctx: auth.WithPrincipal(context.Background(), auth.Principal{Admin: true}), rdb: rdb,
		adm: admin.New(exec, admin.Options{}), led: ledger.New(exec, ledger.Options{}),
		pol: policy.New(exec, policy.Options{MaxPerTenant: 12}), tenant: ledgertest.NewTenantID(t)}
	must(t, e.adm.CreateTenant, e.ctx, &cyclesv1.CreateTenantRequest{TenantId: e.tenant, Name: "policy test",
		DefaultReservationTtlMs: proto.Int64(60_000), MaxReservationTtlMs: proto.Int64(600_000), MaxReservationExtensions: proto.Int32(10)})
	for _, sp := range []string{"", "/workspace:prod", "/workspace:prod/agent:bot"} {
		must(t, e.adm.CreateBudget, e.ctx, &cyclesv1.CreateBudgetRequest{TenantId: e.tenant,
			ScopePath: "tenant:" + e.tenant + sp, Unit: cyclesv1.Unit_UNIT_TOKENS, Allocated: 1_000_000})
	}
	return e
}

// call validates req as the interceptor chain does, then runs f.
func call[Req proto.Message, Resp any](ctx context.Context, f func(context.Context, Req) (Resp, error), req Req) (Resp, error) {
	if err := validate.Message(req); err != nil {
		var zero Resp
		return zero, err
	}
	return f(ctx, req)
}

func must[Req proto.Message, Resp any](t *testing.T, f func(context.Context, Req) (Resp, error), ctx context.Context, req Req) Resp {
	t.Helper()
	resp, err := call(ctx, f, req)
	if err != nil {
		t.Fatalf("%T: %v", req, err)
	}
	return resp
}

func wantCode(t *testing.T, err error, code apierr.Code) {
	t.Helper()
	ae, ok := apierr.As(err)
	if !ok || ae.Code != code {
		t.Fatalf("err = %v, want %s", err, code)
	}
}

func (e *env) create(req *cyclesv1.CreateScopePolicyRequest) *cyclesv1.ScopePolicy {
	e.t.Helper()
	req.TenantId = e.tenant
	if req.Name == "" {
		req.Name = fmt.Sprintf("p-%s-%d", req.GetScopePattern(), req.GetPriority())
	}
	return must(e.t, e.pol.CreateScopePolicy, e.ctx, req).GetPolicy()
}

var n int

func (e *env) reserve(subj *cyclesv1.Subject, mut ...func(*cyclesv1.CreateReservationRequest)) *cyclesv1.CreateReservationResponse {
	e.t.Helper()
	n++
	req := &cyclesv1.CreateReservationRequest{IdempotencyKey: fmt.Sprintf("k-%d", n), Subject: subj,
		Action:   &cyclesv1.Action{Kind: "llm.completion", Name: "m"},
		Estimate: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 10}}
	for _, f := range mut {
		f(req)
	}
	if err := validate.Message(req); err != nil {
		e.t.Fatal(err)
	}
	resp, err := e.led.Reserve(e.ctx, e.tenant, req)
	if err != nil {
		e.t.Fatalf("reserve: %v", err)
	}
	return resp
}

var (
	bot    = &cyclesv1.Subject{Workspace: "prod", Agent: "bot"}
	prod   = &cyclesv1.Subject{Workspace: "prod"}
	tenant = &cyclesv1.Subject{}
	caps1  = &cyclesv1.Caps{MaxTokens: proto.Int64(111)}
	caps2  = &cyclesv1.Caps{MaxTokens: proto.Int64(222), ToolDenylist: []string{"shell"}}
)

// TestPolicyPrecedence: which policy terms a reserve gets, by pattern,
// priority, status and effective window (docs/protocol.md#policies).
func TestPolicyPrecedence(t *testing.T) {
	const day = int64(86_400_000)
	type pol = cyclesv1.CreateScopePolicyRequest
	cases := []struct {
		name     string
		policies []*pol
		subj     *cyclesv1.Subject
		reqTTL   *int64
		reqOver  cyclesv1.CommitOveragePolicy
		caps     *cyclesv1.Caps               // nil: none (decision ALLOW)
		over     cyclesv1.CommitOveragePolicy // unset: the tenant default, ALLOW_IF_AVAILABLE
		ttl      int64                        // 0: the tenant default, 60 s
	}{
		{name: "no policy", subj: bot},
		{name: "descendant pattern matches", subj: bot,
			policies: []*pol{{ScopePattern: "tenant:T/*", Caps: caps1}},
			caps:     caps1},
		{name: "exact tenant pattern does not match a workspace", subj: prod,
			policies: []*pol{{ScopePattern: "tenant:T", Caps: caps1}}},
		{name: "exact tenant pattern matches the tenant", subj: tenant,
			policies: []*pol{{ScopePattern: "tenant:T", Caps: caps1}},
			caps:     caps1},
		{name: "agent wildcard matches an agent, not its workspace", subj: prod,
			policies: []*pol{{ScopePattern: "agent:*", Caps: caps1}}},
		{name: "suffix pattern", subj: bot,
			policies: []*pol{{ScopePattern: "*/agent:bot", Caps: caps1}},
			caps:     caps1},
		{name: "higher priority wins per field", subj: bot,
			policies: []*pol{
				{ScopePattern: "tenant:T/*", Priority: 1, Caps: caps1,
					CommitOveragePolicy: cyclesv1.CommitOveragePolicy_COMMIT_OVERAGE_POLICY_REJECT},
				{ScopePattern: "agent:bot", Priority: 5, Caps: caps2,
					ReservationTtlOverride: &cyclesv1.ReservationTtlOverride{DefaultTtlMs: proto.Int64(5_000)}},
			},
			caps: caps2, over: cyclesv1.CommitOveragePolicy_COMMIT_OVERAGE_POLICY_REJECT, ttl: 5_000},
		{name: "disabled policy is skipped", subj: bot,
			policies: []*pol{
				{ScopePattern: "tenant:T/*", Priority: 1, Caps: caps1},
				{ScopePattern: "agent:bot", Priority: 9, Caps: caps2, Status: cyclesv1.PolicyStatus_POLICY_STATUS_DISABLED},
			},
			caps: caps1},
		{name: "not yet effective", subj: bot,
			policies: []*pol{{ScopePattern: "tenant:T/*", Caps: caps1, EffectiveFromMs: 9_000_000_000_000}}},
		{name: "no longer effective", subj: bot,
			policies: []*pol{{ScopePattern: "tenant:T/*", Caps: caps1, EffectiveUntilMs: day}}},
		{name: "inside its window", subj: bot,
			policies: []*pol{{ScopePattern: "tenant:T/*", Caps: caps1, EffectiveFromMs: day, EffectiveUntilMs: 9_000_000_000_000}},
			caps:     caps1},
		{name: "request overage policy beats the policy's", subj: bot,
			reqOver:  cyclesv1.CommitOveragePolicy_COMMIT_OVERAGE_POLICY_ALLOW_WITH_OVERDRAFT,
			policies: []*pol{{ScopePattern: "tenant:T/*", CommitOveragePolicy: cyclesv1.CommitOveragePolicy_COMMIT_OVERAGE_POLICY_REJECT}},
			over:     cyclesv1.CommitOveragePolicy_COMMIT_OVERAGE_POLICY_ALLOW_WITH_OVERDRAFT},
		{name: "policy max TTL caps the request", subj: bot, reqTTL: proto.Int64(500_000),
			policies: []*pol{{ScopePattern: "tenant:T/*", ReservationTtlOverride: &cyclesv1.ReservationTtlOverride{MaxTtlMs: proto.Int64(30_000)}}}, ttl: 30_000},
		{name: "request TTL beats the policy default", subj: bot, reqTTL: proto.Int64(7_000),
			policies: []*pol{{ScopePattern: "tenant:T/*", ReservationTtlOverride: &cyclesv1.ReservationTtlOverride{DefaultTtlMs: proto.Int64(3_000)}}}, ttl: 7_000},
		{name: "policy max TTL above the tenant max replaces it", subj: bot, reqTTL: proto.Int64(700_000),
			policies: []*pol{{ScopePattern: "*", ReservationTtlOverride: &cyclesv1.ReservationTtlOverride{MaxTtlMs: proto.Int64(800_000)}}}, ttl: 700_000},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			for _, p := range c.policies {
				p = proto.Clone(p).(*pol)
				p.ScopePattern = replaceT(p.ScopePattern, e.tenant)
				e.create(p)
			}
			subj := c.subj
			if subj == tenant {
				subj = &cyclesv1.Subject{Tenant: e.tenant}
			}
			r := e.reserve(subj, func(r *cyclesv1.CreateReservationRequest) {
				r.TtlMs, r.OveragePolicy = c.reqTTL, c.reqOver
			})
			wantDecision := cyclesv1.Decision_DECISION_ALLOW
			if c.caps != nil {
				wantDecision = cyclesv1.Decision_DECISION_ALLOW_WITH_CAPS
			}
			if r.GetDecision() != wantDecision || !proto.Equal(r.GetCaps(), c.caps) {
				t.Errorf("reserve: decision %v caps %v; want %v %v", r.GetDecision(), r.GetCaps(), wantDecision, c.caps)
			}
			if c.over == cyclesv1.CommitOveragePolicy_COMMIT_OVERAGE_POLICY_UNSPECIFIED {
				c.over = cyclesv1.CommitOveragePolicy_COMMIT_OVERAGE_POLICY_ALLOW_IF_AVAILABLE
			}
			if c.ttl == 0 {
				c.ttl = 60_000
			}
			if r.GetOveragePolicy() != c.over {
				t.Errorf("reserve: overage policy %v, want %v", r.GetOveragePolicy(), c.over)
			}
			if r.GetRemainingTtlMs() != c.ttl {
				t.Errorf("reserve: ttl %d, want %d", r.GetRemainingTtlMs(), c.ttl)
			}
			// Decide answers the same caps.
			n++
			d, err := call(e.ctx, func(ctx context.Context, r *cyclesv1.DecideRequest) (*cyclesv1.DecideResponse, error) {
				return e.led.Decide(ctx, e.tenant, r)
			}, &cyclesv1.DecideRequest{IdempotencyKey: fmt.Sprintf("d-%d", n), Subject: subj,
				Action: &cyclesv1.Action{Kind: "llm.completion", Name: "m"}, Estimate: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 1}})
			if err != nil {
				t.Fatal(err)
			}
			if d.GetDecision() != wantDecision || !proto.Equal(d.GetCaps(), c.caps) {
				t.Errorf("decide: decision %v caps %v; want %v %v", d.GetDecision(), d.GetCaps(), wantDecision, c.caps)
			}
		})
	}
}

func replaceT(pattern, tenant string) string {
	out := []byte{}
	for i := 0; i < len(pattern); i++ {
		if i+8 <= len(pattern) && pattern[i:i+8] == "tenant:T" && (i+8 == len(pattern) || pattern[i+8] == '/') {
			out = append(out, "tenant:"+tenant...)
			i += 7
			continue
		}
		out = append(out, pattern[i])
	}
	return string(out)
}

// TestPolicyPolicyCapsBeatBudgetCaps: a matching policy's caps replace the
// caps of the budget at the deepest scope.
func TestPolicyCapsBeatBudgetCaps(t *testing.T) {
	e := newEnv(t)
	must(t, e.adm.UpdateBudget, e.ctx, &cyclesv1.UpdateBudgetRequest{TenantId: e.tenant,
		ScopePath: "tenant:" + e.tenant + "/workspace:prod/agent:bot", Unit: cyclesv1.Unit_UNIT_TOKENS, Caps: caps1})
	if r := e.reserve(bot); !proto.Equal(r.GetCaps(), caps1) {
		t.Fatalf("budget caps: got %v", r.GetCaps())
	}
	e.create(&cyclesv1.CreateScopePolicyRequest{ScopePattern: "agent:bot", Caps: caps2})
	if r := e.reserve(bot); !proto.Equal(r.GetCaps(), caps2) {
		t.Fatalf("policy caps: got %v, want %v", r.GetCaps(), caps2)
	}
}

// TestPolicyMaxExtensions: the policy's max_extensions is the reservation's.
func TestPolicyMaxExtensions(t *testing.T) {
	e := newEnv(t)
	e.create(&cyclesv1.CreateScopePolicyRequest{ScopePattern: "*",
		ReservationTtlOverride: &cyclesv1.ReservationTtlOverride{MaxExtensions: proto.Int32(1)}})
	r := e.reserve(bot)
	ext := func(key string) error {
		_, err := e.led.Extend(e.ctx, e.tenant, &cyclesv1.ExtendReservationRequest{ReservationId: r.GetReservationId(),
			IdempotencyKey: key, ExtendByMs: 1000})
		return err
	}
	if err := ext("e1"); err != nil {
		t.Fatal(err)
	}
	wantCode(t, ext("e2"), apierr.MaxExtensionsExceeded)
}

// TestPolicyUpdateTakesEffect: an update (here DISABLED, then ACTIVE with new
// caps) changes the next reserve, never a reservation already made.
func TestPolicyUpdateTakesEffect(t *testing.T) {
	e := newEnv(t)
	p := e.create(&cyclesv1.CreateScopePolicyRequest{ScopePattern: "*", Caps: caps1})
	if r := e.reserve(bot); !proto.Equal(r.GetCaps(), caps1) {
		t.Fatalf("caps %v", r.GetCaps())
	}
	up := func(r *cyclesv1.UpdateScopePolicyRequest) *cyclesv1.ScopePolicy {
		r.TenantId, r.PolicyId = e.tenant, p.GetPolicyId()
		return must(t, e.pol.UpdateScopePolicy, e.ctx, r).GetPolicy()
	}
	got := up(&cyclesv1.UpdateScopePolicyRequest{Status: cyclesv1.PolicyStatus_POLICY_STATUS_DISABLED})
	if got.GetStatus() != cyclesv1.PolicyStatus_POLICY_STATUS_DISABLED || got.GetUpdatedAtMs() == 0 || !proto.Equal(got.GetCaps(), caps1) {
		t.Fatalf("after disable: %v", got)
	}
	if r := e.reserve(bot); r.GetCaps() != nil {
		t.Fatalf("disabled policy applied: %v", r.GetCaps())
	}
	if v, _ := e.rdb.HExists(e.ctx, keys.Tenant(e.tenant).Record(), "pol").Result(); v {
		t.Fatal("no ACTIVE policy left, yet the tenant record keeps a compiled copy")
	}
	up(&cyclesv1.UpdateScopePolicyRequest{Status: cyclesv1.PolicyStatus_POLICY_STATUS_ACTIVE, Caps: caps2})
	if r := e.reserve(bot); !proto.Equal(r.GetCaps(), caps2) {
		t.Fatalf("caps %v, want %v", r.GetCaps(), caps2)
	}
}

// TestPolicyCRUD: create, get, list (filters, pages) and update refusals.
func TestPolicyCRUD(t *testing.T) {
	e := newEnv(t)
	a := e.create(&cyclesv1.CreateScopePolicyRequest{Name: "a", ScopePattern: "tenant:" + e.tenant + "/workspace:Prod/*",
		Priority: 3, Caps: caps1, CommitOveragePolicy: cyclesv1.CommitOveragePolicy_COMMIT_OVERAGE_POLICY_REJECT,
		RateLimits: &cyclesv1.PolicyRateLimits{MaxReservationsPerMinute: proto.Int32(5)}})
	if a.GetScopePattern() != "tenant:"+e.tenant+"/workspace:prod/*" || a.GetStatus() != cyclesv1.PolicyStatus_POLICY_STATUS_ACTIVE ||
		a.GetCreatedAtMs() == 0 || policy.TenantOf(a.GetPolicyId()) != e.tenant || a.GetRateLimits().GetMaxReservationsPerMinute() != 5 {
		t.Fatalf("created %v", a)
	}
	got := must(t, e.pol.GetScopePolicy, e.ctx, &cyclesv1.GetScopePolicyRequest{TenantId: e.tenant, PolicyId: a.GetPolicyId()})
	if !proto.Equal(got.GetPolicy(), a) {
		t.Fatalf("get %v, want %v", got.GetPolicy(), a)
	}
	for i := 0; i < 4; i++ {
		e.create(&cyclesv1.CreateScopePolicyRequest{Name: fmt.Sprintf("b%d", i), ScopePattern: "agent:*",
			Status: cyclesv1.PolicyStatus_POLICY_STATUS_DISABLED})
	}
	var all []*cyclesv1.ScopePolicy
	cursor := ""
	for pages := 0; ; pages++ {
		l := must(t, e.pol.ListScopePolicies, e.ctx, &cyclesv1.ListScopePoliciesRequest{TenantId: e.tenant, Limit: 2, Cursor: cursor})
		all = append(all, l.GetPolicies()...)
		if !l.GetHasMore() {
			break
		}
		cursor = l.GetNextCursor()
		if pages > 5 {
			t.Fatal("listing does not end")
		}
	}
	if len(all) != 5 {
		t.Fatalf("listed %d policies, want 5", len(all))
	}
	l := must(t, e.pol.ListScopePolicies, e.ctx, &cyclesv1.ListScopePoliciesRequest{TenantId: e.tenant,
		Status: cyclesv1.PolicyStatus_POLICY_STATUS_DISABLED, ScopePattern: "agent:*"})
	if len(l.GetPolicies()) != 4 {
		t.Fatalf("filtered list: %d", len(l.GetPolicies()))
	}

	other := ledgertest.NewTenantID(t)
	refusals := []struct {
		name string
		err  func() error
		code apierr.Code
	}{
		{"duplicate name", func() error {
			return errtest.ErrOf(call(e.ctx, e.pol.CreateScopePolicy, &cyclesv1.CreateScopePolicyRequest{TenantId: e.tenant, Name: "a", ScopePattern: "*"}))
		}, apierr.DuplicateResource},
		{"unknown tenant", func() error {
			return errtest.ErrOf(call(e.ctx, e.pol.CreateScopePolicy, &cyclesv1.CreateScopePolicyRequest{TenantId: other, Name: "x", ScopePattern: "*"}))
		}, apierr.TenantNotFound},
		{"pattern of another tenant", func() error {
			return errtest.ErrOf(call(e.ctx, e.pol.CreateScopePolicy, &cyclesv1.CreateScopePolicyRequest{TenantId: e.tenant, Name: "x", ScopePattern: "tenant:" + other}))
		}, apierr.InvalidRequest},
		{"ttl below 1 s", func() error {
			_, err := call(e.ctx, e.pol.CreateScopePolicy, &cyclesv1.CreateScopePolicyRequest{TenantId: e.tenant, Name: "x", ScopePattern: "*",
				ReservationTtlOverride: &cyclesv1.ReservationTtlOverride{DefaultTtlMs: proto.Int64(999)}})
			return err
		}, apierr.InvalidRequest},
		{"window ends before it starts", func() error {
			_, err := call(e.ctx, e.pol.CreateScopePolicy, &cyclesv1.CreateScopePolicyRequest{TenantId: e.tenant, Name: "x", ScopePattern: "*",
				EffectiveFromMs: 2000, EffectiveUntilMs: 1000})
			return err
		}, apierr.InvalidRequest},
		{"update: window ends before the stored start", func() error {
			_, err := call(e.ctx, e.pol.UpdateScopePolicy, &cyclesv1.UpdateScopePolicyRequest{TenantId: e.tenant, PolicyId: a.GetPolicyId(),
				EffectiveFromMs: proto.Int64(5000)})
			if err != nil {
				return err
			}
			_, err = call(e.ctx, e.pol.UpdateScopePolicy, &cyclesv1.UpdateScopePolicyRequest{TenantId: e.tenant, PolicyId: a.GetPolicyId(),
				EffectiveUntilMs: proto.Int64(4000)})
			return err
		}, apierr.InvalidRequest},
		{"update: name taken", func() error {
			return errtest.ErrOf(call(e.ctx, e.pol.UpdateScopePolicy, &cyclesv1.UpdateScopePolicyRequest{TenantId: e.tenant, PolicyId: a.GetPolicyId(), Name: proto.String("b1")}))
		}, apierr.DuplicateResource},
		{"get: another tenant's id", func() error {
			return errtest.ErrOf(call(e.ctx, e.pol.GetScopePolicy, &cyclesv1.GetScopePolicyRequest{TenantId: other, PolicyId: a.GetPolicyId()}))
		}, apierr.NotFound},
		{"update: unknown id", func() error {
			_, err := call(e.ctx, e.pol.UpdateScopePolicy, &cyclesv1.UpdateScopePolicyRequest{TenantId: e.tenant,
				PolicyId: "pol_" + e.tenant + "_00000000000000000000000000000000", Priority: proto.Int32(1)})
			return err
		}, apierr.NotFound},
	}
	for _, r := range refusals {
		t.Run(r.name, func(t *testing.T) { wantCode(t, r.err(), r.code) })
	}

	// The bound: MaxPerTenant is 12 here and the tenant holds 5.
	for i := 0; i < 7; i++ {
		e.create(&cyclesv1.CreateScopePolicyRequest{Name: fmt.Sprintf("c%d", i), ScopePattern: "*"})
	}
	_, err := call(e.ctx, e.pol.CreateScopePolicy, &cyclesv1.CreateScopePolicyRequest{TenantId: e.tenant, Name: "over", ScopePattern: "*"})
	wantCode(t, err, apierr.LimitExceeded)

	// A closed tenant's policies are read-only.
	must(t, e.adm.CloseTenant, e.ctx, &cyclesv1.CloseTenantRequest{TenantId: e.tenant})
	_, err = call(e.ctx, e.pol.UpdateScopePolicy, &cyclesv1.UpdateScopePolicyRequest{TenantId: e.tenant, PolicyId: a.GetPolicyId(), Priority: proto.Int32(9)})
	wantCode(t, err, apierr.TenantClosed)
	_, err = call(e.ctx, e.pol.CreateScopePolicy, &cyclesv1.CreateScopePolicyRequest{TenantId: e.tenant, Name: "late", ScopePattern: "*"})
	wantCode(t, err, apierr.TenantClosed)
}

// TestPolicyMalformedCompiledFailsClosed: a corrupt compiled copy refuses the
// reserve (INTERNAL_ERROR) rather than ignoring the tenant's policies.
func TestPolicyMalformedCompiledFailsClosed(t *testing.T) {
	e := newEnv(t)
	if err := e.rdb.HSet(e.ctx, keys.Tenant(e.tenant).Record(), "pol", "{not json").Err(); err != nil {
		t.Fatal(err)
	}
	_, err := e.led.Reserve(e.ctx, e.tenant, &cyclesv1.CreateReservationRequest{IdempotencyKey: "x", Subject: bot,
		Action: &cyclesv1.Action{Kind: "k", Name: "m"}, Estimate: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 1}})
	wantCode(t, err, apierr.InternalError)
}

// policy.created and policy.updated are appended to the tenant's event
// stream by the script that writes the policy, naming it (and, on update,
// the fields the patch replaced).
func TestPolicyEvents(t *testing.T) {
	e := newEnv(t)
	p := e.create(&cyclesv1.CreateScopePolicyRequest{Name: "ev", ScopePattern: "*", Caps: caps1})
	up := &cyclesv1.UpdateScopePolicyRequest{TenantId: e.tenant, PolicyId: p.GetPolicyId(),
		Status: cyclesv1.PolicyStatus_POLICY_STATUS_DISABLED, Caps: caps2}
	must(t, e.pol.UpdateScopePolicy, e.ctx, up)
	msgs, err := e.rdb.XRange(e.ctx, keys.Tenant(e.tenant).Events(), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range msgs {
		if typ, _ := m.Values["type"].(string); strings.HasPrefix(typ, "policy.") {
			var d struct {
				PolicyID      string `json:"policy_id"`
				Name, Status  string
				ChangedFields []string `json:"changed_fields"`
			}
			if err := json.Unmarshal([]byte(m.Values["data"].(string)), &d); err != nil {
				t.Fatal(err)
			}
			if d.PolicyID != p.GetPolicyId() || d.Name != "ev" || m.Values["cat"] != "policy" {
				t.Fatalf("%s: %v", typ, m.Values)
			}
			got = append(got, typ+" "+d.Status+" "+strings.Join(d.ChangedFields, ","))
		}
	}
	want := []string{"policy.created ACTIVE ", "policy.updated DISABLED caps,status"}
	if !slices.Equal(got, want) {
		t.Fatalf("policy events %q, want %q", got, want)
	}
}
