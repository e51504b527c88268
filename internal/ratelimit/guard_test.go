package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/cyclesgo/cycles-go/internal/apierr"
)

const (
	decideMethod      = "/cycles.v1.RuntimeService/Decide"
	getBalancesMethod = "/cycles.v1.RuntimeService/GetBalances"
)

// guard runs one Guard call and fails the test on a store error.
func (e *env) guard(t *testing.T, cfg GuardConfig, method, keyID string) (Decision, bool) {
	t.Helper()
	d, checked, err := e.lim.Guard(context.Background(), cfg, method, keyID)
	if err != nil {
		t.Fatalf("guard %s %s: %v", keyID, method, err)
	}
	return d, checked
}

// The guard throttles per API key: over the limit a call is denied with
// LIMIT_EXCEEDED and a retry delay; unguarded methods and calls without an
// API key are not checked. (The gRPC side, RESOURCE_EXHAUSTED with RetryInfo
// and rate headers, is internal/server's TestRateLimitGuard.)
func TestGuardThrottlesPerAPIKey(t *testing.T) {
	e := clocked(t, t0)
	p := e.mustPolicy(t, Policy{Algorithm: SlidingLog, Limit: 2, WindowMs: 60_000})
	cfg := GuardConfig{Policy: p.Name}

	for i := 0; i < 2; i++ {
		d, checked := e.guard(t, cfg, decideMethod, "k1")
		if !checked || !d.Allowed || d.Remaining != []int64{1, 0}[i] {
			t.Fatalf("call %d: checked=%v %+v", i, checked, d)
		}
	}
	e.at(t0, 15_000)
	d, checked := e.guard(t, cfg, decideMethod, "k1")
	if !checked || d.Allowed || d.Policy != p.Name || d.RetryAfter != 45*time.Second {
		t.Fatalf("3rd call: checked=%v %+v, want a denial retrying in 45s (the first hit expires at t=60s)", checked, d)
	}
	refusal := LimitExceeded(d)
	if refusal.Code != apierr.LimitExceeded || refusal.Details["policy"] != p.Name ||
		refusal.Details["retry_after_ms"] != "45000" || refusal.RetryAfter != 45*time.Second {
		t.Fatalf("refusal: %+v", refusal)
	}

	// Another API key has its own budget of calls.
	if d, checked := e.guard(t, cfg, decideMethod, "k2"); !checked || !d.Allowed {
		t.Fatalf("k2: checked=%v %+v", checked, d)
	}
	if d, checked := e.guard(t, cfg, getBalancesMethod, "k3"); !checked || !d.Allowed {
		t.Fatalf("k3: checked=%v %+v", checked, d)
	}
	// No API key (e.g. the admin), or a method outside the guarded prefixes:
	// not guarded.
	for i := 0; i < 5; i++ {
		if _, checked := e.guard(t, cfg, decideMethod, ""); checked {
			t.Fatal("a call without an API key was checked")
		}
		if _, checked := e.guard(t, cfg, "/cycles.v1.AdminService/GetTenant", "k1"); checked {
			t.Fatal("an unguarded method was checked")
		}
	}
	if got := e.tel.Sum(t, "cycles.ratelimit.guard.decisions", attrOutcome("denied")); got != 1 {
		t.Fatalf("guard denials = %d, want 1", got)
	}
	if got := e.tel.Sum(t, "cycles.ratelimit.guard.decisions", attrOutcome("allowed")); got != 4 {
		t.Fatalf("guard allowed = %d, want 4", got)
	}
}

// Per-method policies add a limit per (API key, method); key overrides
// replace the default; a missing policy lets calls through (counted).
func TestGuardMethodAndKeyPolicies(t *testing.T) {
	e := clocked(t, t0)
	wide := e.mustPolicy(t, Policy{Algorithm: TokenBucket, Limit: 100, WindowMs: 60_000})
	decide := e.mustPolicy(t, Policy{Algorithm: PackedLog, Limit: 1, WindowMs: 60_000})
	vip := e.mustPolicy(t, Policy{Algorithm: SlidingWindow, Limit: 1000, WindowMs: 60_000})
	cfg := GuardConfig{
		Policy:         wide.Name,
		KeyPolicies:    map[string]string{"vip": vip.Name, "broken": "no-such-policy"},
		MethodPolicies: map[string]string{decideMethod: decide.Name},
	}
	if d, _ := e.guard(t, cfg, decideMethod, "k1"); !d.Allowed {
		t.Fatalf("1st Decide: %+v", d)
	}
	if d, _ := e.guard(t, cfg, decideMethod, "k1"); d.Allowed || d.Policy != decide.Name {
		t.Fatalf("2nd Decide: %+v, want the per-method limit", d)
	}
	// The per-method limit is per key.
	if d, _ := e.guard(t, cfg, decideMethod, "vip"); !d.Allowed {
		t.Fatalf("vip Decide: %+v", d)
	}
	in, err := e.lim.Inspect(context.Background(), vip.Name, APIKeyKey("vip", ""))
	if err != nil || in.Count != 1 {
		t.Fatalf("vip key-wide state: %+v %v", in, err)
	}
	in, err = e.lim.Inspect(context.Background(), wide.Name, APIKeyKey("vip", ""))
	if err != nil || in.Type != "none" {
		t.Fatalf("vip must not use the default policy: %+v %v", in, err)
	}
	if _, checked := e.guard(t, cfg, getBalancesMethod, "broken"); checked {
		t.Fatal("a missing policy must let the call through unchecked")
	}
	if got := e.tel.Sum(t, "cycles.ratelimit.guard.skipped"); got != 1 {
		t.Fatalf("guard.skipped = %d", got)
	}
}
