package ratelimit

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/validate"
	"github.com/cyclesgo/cycles-go/test/redistest"
)

// Bad policies are INVALID_REQUEST (gRPC INVALID_ARGUMENT), from the RPC
// validator and from the Go API alike, and nothing is stored.
func TestBadPoliciesAreRejected(t *testing.T) {
	e := newEnv(t, "redis", redistest.SharedClient(t), nil, Options{})
	good := Policy{Algorithm: CappedLog, Limit: 10, WindowMs: 1000}
	cases := []struct {
		name  string
		edit  func(*Policy)
		field string
	}{
		{"zero limit", func(p *Policy) { p.Limit = 0 }, "policy.limit"},
		{"negative limit", func(p *Policy) { p.Limit = -5 }, "policy.limit"},
		{"zero window", func(p *Policy) { p.WindowMs = 0 }, "policy.window_ms"},
		{"negative window", func(p *Policy) { p.WindowMs = -1 }, "policy.window_ms"},
		{"window over a day", func(p *Policy) { p.WindowMs = 86_400_001 }, "policy.window_ms"},
		{"cap below limit", func(p *Policy) { p.Cap = 9 }, "policy.cap"},
		{"negative cap", func(p *Policy) { p.Cap = -1 }, "policy.cap"},
		{"cap on another algorithm", func(p *Policy) { p.Algorithm, p.Cap = SlidingLog, 20 }, "policy.cap"},
		{"slack below 10%", func(p *Policy) { p.SlackMs = 99 }, "policy.slack_ms"},
		{"negative slack", func(p *Policy) { p.SlackMs = -1 }, "policy.slack_ms"},
		{"no algorithm", func(p *Policy) { p.Algorithm = 0 }, "policy.algorithm"},
		{"unknown algorithm", func(p *Policy) { p.Algorithm = 99 }, "policy.algorithm"},
		{"log limit too large", func(p *Policy) { p.Limit = validate.MaxLogLimit + 1 }, "policy.limit"},
		{"name with a brace", func(p *Policy) { p.Name = "a{b" }, "policy.name"},
		{"name with a space", func(p *Policy) { p.Name = "a b" }, "policy.name"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := good
			p.Name = uniq("bad")
			c.edit(&p)
			_, err := e.lim.CreatePolicy(context.Background(), p)
			assertInvalid(t, err, c.field)
			err = validate.Message(&cyclesv1.CreatePolicyRequest{Policy: p.Proto()})
			assertInvalid(t, err, c.field)
			err = validate.Message(&cyclesv1.UpdatePolicyRequest{Policy: p.Proto()})
			assertInvalid(t, err, c.field)
			if _, err := e.lim.GetPolicy(context.Background(), p.Name); err == nil {
				t.Fatal("a rejected policy was stored")
			}
		})
	}
	// Counter-algorithm limits are bounded so limit x window stays below 2^53.
	p := Policy{Name: uniq("big"), Algorithm: TokenBucket, Limit: validate.MaxCounterLimit + 1, WindowMs: 1000}
	_, err := e.lim.CreatePolicy(context.Background(), p)
	assertInvalid(t, err, "policy.limit")
}

func assertInvalid(t *testing.T, err error, field string) {
	t.Helper()
	ae, ok := apierr.As(err)
	if !ok || ae.Code != apierr.InvalidRequest || ae.Code.GRPCCode() != codes.InvalidArgument || ae.Details["field"] != field {
		t.Fatalf("err = %v, want INVALID_REQUEST on %s", err, field)
	}
}

// Keys and names that could escape the hash tag are refused.
func TestKeysCannotEscapeTheHashTag(t *testing.T) {
	e := newEnv(t, "redis", redistest.SharedClient(t), nil, Options{})
	p := e.mustPolicy(t, Policy{Algorithm: TokenBucket, Limit: 10, WindowMs: 1000})
	for _, k := range []string{"", "a}b", "{x}", "a b", "a\tb", "a\nb", "a\x00b", "\u2028", "a\x7f", strings.Repeat("k", 1025), "\xff"} {
		_, err := e.lim.Check(context.Background(), p.Name, k, 1)
		if !apierr.HasCode(err, apierr.InvalidRequest) {
			t.Errorf("key %q: err %v, want INVALID_REQUEST", k, err)
		}
		if err := validate.Message(&cyclesv1.CheckRequest{Policy: p.Name, Key: k}); !apierr.HasCode(err, apierr.InvalidRequest) {
			t.Errorf("key %q: validator %v, want INVALID_REQUEST", k, err)
		}
	}
	if got := StateKey("pol", "a:b/c"); got != "cy:rl:{pol:a:b/c}" {
		t.Fatalf("state key %q", got)
	}
}

// Policy CRUD: create/get/list/update/delete, the documented error codes,
// defaults resolved at create, and the policy.changes counter.
func TestPolicyLifecycle(t *testing.T) {
	for _, e := range backends(t) {
		t.Run(e.name, func(t *testing.T) {
			ctx := context.Background()
			name := uniq("life")
			p, err := e.lim.CreatePolicy(ctx, Policy{Name: name, Algorithm: CappedLog, Limit: 10, WindowMs: 1005})
			if err != nil {
				t.Fatal(err)
			}
			if p.Cap != 12 || p.SlackMs != 101 {
				t.Fatalf("defaults: cap %d slack %d, want 12 and 101", p.Cap, p.SlackMs)
			}
			if _, err := e.lim.CreatePolicy(ctx, p); !apierr.HasCode(err, apierr.DuplicateResource) {
				t.Fatalf("duplicate create: %v", err)
			}
			got, err := e.lim.GetPolicy(ctx, name)
			if err != nil || got != p {
				t.Fatalf("get: %+v %v, want %+v", got, err, p)
			}
			p.Limit, p.Shadow = 20, true
			if _, err := e.lim.UpdatePolicy(ctx, p); !apierr.HasCode(err, apierr.InvalidRequest) {
				t.Fatalf("update with cap 12 < limit 20: %v", err)
			}
			p.Cap = 0
			up, err := e.lim.UpdatePolicy(ctx, p)
			if err != nil || up.Cap != 24 || !up.Shadow {
				t.Fatalf("update: %+v %v", up, err)
			}
			list, err := e.lim.ListPolicies(ctx)
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, q := range list {
				found = found || q == up
			}
			if !found {
				t.Fatalf("list %+v lacks %+v", list, up)
			}
			if err := e.lim.DeletePolicy(ctx, name); err != nil {
				t.Fatal(err)
			}
			if err := e.lim.DeletePolicy(ctx, name); !apierr.HasCode(err, apierr.PolicyNotFound) {
				t.Fatalf("second delete: %v", err)
			}
			if _, err := e.lim.UpdatePolicy(ctx, p); !apierr.HasCode(err, apierr.PolicyNotFound) {
				t.Fatalf("update of a deleted policy: %v", err)
			}
			if _, err := e.lim.Check(ctx, name, "k", 1); !apierr.HasCode(err, apierr.PolicyNotFound) {
				t.Fatalf("check on a deleted policy: %v (the deleting replica must not serve it from cache)", err)
			}
			for op, want := range map[string]int64{"create": 1, "update": 1, "delete": 1} {
				if got := e.tel.Sum(t, "cycles.ratelimit.policy.changes", attrOp(op)); got != want {
					t.Fatalf("policy.changes{op=%s} = %d, want %d", op, got, want)
				}
			}
			if got := e.tel.Sum(t, "cycles.ratelimit.errors", attrReason("POLICY_NOT_FOUND")); got != 1 {
				t.Fatalf("errors{POLICY_NOT_FOUND} = %d, want 1", got)
			}
		})
	}
}

// An empty policy table lists as an empty slice (the script returns '[]').
func TestListPoliciesEmpty(t *testing.T) {
	e := clocked(t, t0)
	list, err := e.lim.ListPolicies(context.Background())
	if err != nil || len(list) != 0 {
		t.Fatalf("list = %v, %v", list, err)
	}
}

// The cache: another replica sees an update after PolicyCacheTTL; with
// caching off it sees it at once.
func TestPolicyCacheAcrossReplicas(t *testing.T) {
	e := clocked(t, t0)
	ctx := context.Background()
	other := New(e.exec, Options{PolicyCacheTTL: -1}) // no caching
	cached := New(e.exec, Options{PolicyCacheTTL: 1 << 62})
	p := e.mustPolicy(t, Policy{Algorithm: TokenBucket, Limit: 1, WindowMs: 86_400_000})
	if d, _ := cached.Check(ctx, p.Name, "a", 1); !d.Allowed {
		t.Fatal("first check denied")
	}
	p.Limit = 5
	if _, err := e.lim.UpdatePolicy(ctx, p); err != nil {
		t.Fatal(err)
	}
	if d, _ := other.Check(ctx, p.Name, "b", 5); !d.Allowed || d.Limit != 5 {
		t.Fatalf("uncached replica: %+v, want the new limit at once", d)
	}
	if _, err := cached.Check(ctx, p.Name, "c", 5); !apierr.HasCode(err, apierr.InvalidRequest) {
		t.Fatalf("cached replica: %v, want the old limit (1) until its cache expires", err)
	}
}

// Decisions and near-limit (>= 80%) are counted by policy and outcome.
func TestDecisionMetrics(t *testing.T) {
	e := clocked(t, t0)
	p := e.mustPolicy(t, Policy{Algorithm: SlidingLog, Limit: 5, WindowMs: 1000})
	for i := 0; i < 7; i++ {
		e.check(t, p.Name, "m", 1)
	}
	if got := e.tel.Sum(t, "cycles.ratelimit.decisions", attrPolicy(p.Name), attrOutcome("allowed")); got != 5 {
		t.Fatalf("allowed = %d", got)
	}
	if got := e.tel.Sum(t, "cycles.ratelimit.decisions", attrPolicy(p.Name), attrOutcome("denied")); got != 2 {
		t.Fatalf("denied = %d", got)
	}
	// counts 4 and 5 (>= 4 = 80% of 5), then two denials at 5.
	if got := e.tel.Sum(t, "cycles.ratelimit.near_limit", attrPolicy(p.Name)); got != 4 {
		t.Fatalf("near_limit = %d, want 4", got)
	}
}

// Inspect reports the live count, footprint, encoding and TTL of a key.
func TestInspect(t *testing.T) {
	eachAlgorithm(t, allAlgorithms, func(t *testing.T, e *env, alg Algorithm) {
		ctx := context.Background()
		p := e.mustPolicy(t, Policy{Algorithm: alg, Limit: 10, WindowMs: 86_400_000})
		e.oneDay(t, alg)
		in, err := e.lim.Inspect(ctx, p.Name, "i")
		if err != nil || in.Type != "none" || in.TTLms != -2 || in.Count != 0 || in.MemoryUsageBytes != 0 {
			t.Fatalf("absent key: %+v %v", in, err)
		}
		e.check(t, p.Name, "i", 3)
		in, err = e.lim.Inspect(ctx, p.Name, "i")
		if err != nil {
			t.Fatal(err)
		}
		if in.Count != 3 || in.MemoryUsageBytes <= 0 || in.TTLms <= 0 || in.RedisKey != StateKey(p.Name, "i") || in.Algorithm != alg {
			t.Fatalf("inspect: %+v", in)
		}
		if e.mr == nil {
			want := map[Algorithm]string{SlidingLog: "listpack", CappedLog: "listpack", PackedLog: "raw", SlidingWindow: "listpack", TokenBucket: "listpack"}[alg]
			if in.Encoding != want {
				t.Fatalf("encoding %q, want %q", in.Encoding, want)
			}
		}
		if got := e.tel.Sum(t, "cycles.ratelimit.inspections", attrPolicy(p.Name)); got != 2 {
			t.Fatalf("inspections = %d", got)
		}
	})
}
