// Package ratelimit is cyclesd's Redis rate limiter: named policies, five
// algorithms (each one Lua script, Redis TIME as the only clock), an operator
// Inspect, and the gRPC guard that throttles the runtime API per API key.
//
// Hot path: Check reads the policy from a short in-process cache
// (Options.PolicyCacheTTL, default 1 s) and passes its parameters as ARGV, so
// one check is exactly one EVALSHA on one key. A policy change is seen at once
// by the replica that made it and by the others within the cache TTL.
//
// State of (policy, key) lives in cy:rl:{<policy>:<key>}, hash-tagged so each
// script touches one Cluster slot. Keys and policy names cannot contain '{',
// '}', whitespace or control characters, so no caller can escape the tag.
// See README.md for the invariants and the tests that prove them.
package ratelimit

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/script"
	"github.com/cyclesgo/cycles-go/internal/telemetry"
	"github.com/cyclesgo/cycles-go/internal/validate"
)

// DefaultPolicyCacheTTL is how long Check trusts a cached policy.
const DefaultPolicyCacheTTL = time.Second

// NearLimitRatio is the usage share from which a decision counts as near the limit.
const NearLimitRatio = 0.8

// Options configure a Limiter.
type Options struct {
	// MeterProvider receives the limiter's metrics (nil: no-op).
	MeterProvider metric.MeterProvider
	// PolicyCacheTTL is how long a policy is cached in-process (0: the default,
	// negative: no caching, every Check reads the policy first).
	PolicyCacheTTL time.Duration
}

// Limiter decides rate limits. It is safe for concurrent use.
type Limiter struct {
	exec  *script.Executor
	opts  Options
	cache policyCache
	m     metrics
}

// New returns a Limiter running its scripts on exec.
func New(exec *script.Executor, opts Options) *Limiter {
	if opts.PolicyCacheTTL == 0 {
		opts.PolicyCacheTTL = DefaultPolicyCacheTTL
	}
	return &Limiter{
		exec:  exec,
		opts:  opts,
		cache: policyCache{entries: map[string]cacheEntry{}},
		m:     newMetrics(opts.MeterProvider),
	}
}

// Decision is the outcome of one Check.
type Decision struct {
	Policy    string
	Algorithm Algorithm
	// Allowed is true when the request may proceed (always, in shadow mode).
	Allowed bool
	// ShadowDenied is true when a shadow policy would have denied.
	ShadowDenied bool
	// Count is the usage after this decision; Remaining = max(0, Limit - Count).
	Count, Remaining, Limit int64
	WindowMs                int64
	// ResetAfter is when the usage fully resets (if nothing else arrives).
	ResetAfter time.Duration
	// RetryAfter is when a denied request could succeed; 0 when allowed.
	RetryAfter time.Duration
	// NowMs is the Redis TIME the decision was made at.
	NowMs int64
}

// StateKey is the Redis key of (policy, key): cy:rl:{<policy>:<key>}.
func StateKey(policy, key string) string {
	return keys.Prefix + "rl:{" + policy + ":" + key + "}"
}

// TenantKey namespaces a tenant caller's key, so tenants can neither read nor
// drain each other's keys nor the guard's per-API-key state.
func TenantKey(tenant, key string) string { return "t/" + tenant + "/" + key }

// APIKeyKey is the guard's key of one API key (and method, when non-empty).
func APIKeyKey(keyID, method string) string {
	if method == "" {
		return "k/" + keyID
	}
	return "k/" + keyID + method
}

// CallerKey maps a key from an RPC to the key Check uses: admin callers use
// it as given, tenant callers get their own namespace (TenantKey).
func CallerKey(ctx context.Context, key string) (string, error) {
	p, ok := auth.FromContext(ctx)
	switch {
	case ok && p.Admin:
		return key, nil
	case ok && p.Tenant != "":
		return TenantKey(p.Tenant, key), nil
	default:
		return "", apierr.New(apierr.Unauthorized, "a tenant API key or the admin key is required")
	}
}

// The checks' scripts (lua/ratelimit/), one per algorithm, plus the
// operator's inspection; all small, bounded and per request.
var (
	scriptSlidingLog    = script.Bind[stateKeys, logArgs]("ratelimit/sliding_log", script.Pipelined)
	scriptSlidingWindow = script.Bind[stateKeys, checkArgs]("ratelimit/sliding_window", script.Pipelined)
	scriptTokenBucket   = script.Bind[stateKeys, checkArgs]("ratelimit/token_bucket", script.Pipelined)
	scriptPackedLog     = script.Bind[stateKeys, checkArgs]("ratelimit/packed_log", script.Pipelined)
	scriptInspect       = script.Bind[stateKeys, inspectArgs]("ratelimit/inspect", script.Pipelined)
)

// stateKeys are the KEYS of the check and inspect scripts: one state key.
type stateKeys struct {
	State string `lua:"state_key"`
}

// checkArgs are the ARGV of every check script.
type checkArgs struct {
	Limit    int64 `lua:"limit"`
	WindowMs int64 `lua:"window_ms"`
	Hits     int64 `lua:"hits"`
	Shadow   bool  `lua:"shadow"`
	TTLms    int64 `lua:"ttl_ms"`
}

// logArgs are SLIDING_LOG's: checkArgs and the cap (CAPPED_LOG; 0 = none).
type logArgs struct {
	Limit    int64 `lua:"limit"`
	WindowMs int64 `lua:"window_ms"`
	Hits     int64 `lua:"hits"`
	Shadow   bool  `lua:"shadow"`
	TTLms    int64 `lua:"ttl_ms"`
	Cap      int64 `lua:"cap"`
}

type inspectArgs struct {
	Algorithm string `lua:"algorithm"`
	Limit     int64  `lua:"limit"`
	WindowMs  int64  `lua:"window_ms"`
}

// Check counts hits (>= 1) against key under the named policy and decides.
// A denial is a Decision with Allowed false, not an error; errors are
// INVALID_REQUEST (bad name or key, hits > limit), POLICY_NOT_FOUND, or
// UNAVAILABLE when Redis cannot be reached (fail closed).
func (l *Limiter) Check(ctx context.Context, policy, key string, hits int64) (Decision, error) {
	if err := validate.RateLimitPolicyName("policy", policy); err != nil {
		return Decision{}, err
	}
	if err := validate.RateLimitStateKey("key", key); err != nil {
		return Decision{}, err
	}
	if hits < 1 {
		return Decision{}, apierr.Invalid("hits", "must be >= 1")
	}
	p, err := l.Policy(ctx, policy)
	if err != nil {
		// No policy attribute: unknown names would be unbounded cardinality.
		l.m.errors.Add(ctx, 1, metric.WithAttributes(reasonAttr(err)))
		return Decision{}, err
	}
	if hits > p.Limit {
		return Decision{}, apierr.Invalid("hits", "must be at most the policy limit %d", p.Limit).
			With("limit", strconv.FormatInt(p.Limit, 10))
	}
	d, err := l.run(ctx, p, key, hits)
	if err != nil {
		l.m.errors.Add(ctx, 1, metric.WithAttributes(attribute.String("policy", policy), reasonAttr(err)))
		return Decision{}, err
	}
	l.m.record(ctx, d)
	return d, nil
}

// run executes the policy's script on the state key.
func (l *Limiter) run(ctx context.Context, p Policy, key string, hits int64) (Decision, error) {
	k := stateKeys{StateKey(p.Name, key)}
	a := checkArgs{Limit: p.Limit, WindowMs: p.WindowMs, Hits: hits, Shadow: p.Shadow, TTLms: p.TTL().Milliseconds()}
	var (
		name  string
		reply []any
		err   error
	)
	switch p.Algorithm {
	case SlidingLog, CappedLog:
		la := logArgs{Limit: a.Limit, WindowMs: a.WindowMs, Hits: a.Hits, Shadow: a.Shadow, TTLms: a.TTLms}
		if p.Algorithm == CappedLog {
			la.Cap = p.Cap
		}
		name = scriptSlidingLog.Name()
		reply, err = scriptSlidingLog.RunFlat(ctx, l.exec, k, la)
	case SlidingWindow:
		name = scriptSlidingWindow.Name()
		reply, err = scriptSlidingWindow.RunFlat(ctx, l.exec, k, a)
	case TokenBucket:
		name = scriptTokenBucket.Name()
		reply, err = scriptTokenBucket.RunFlat(ctx, l.exec, k, a)
	case PackedLog:
		name = scriptPackedLog.Name()
		reply, err = scriptPackedLog.RunFlat(ctx, l.exec, k, a)
	default:
		return Decision{}, apierr.New(apierr.InternalError, "policy %s: unknown algorithm %d", p.Name, p.Algorithm)
	}
	if err != nil {
		return Decision{}, err
	}
	// The fields of lua/lib/ratelimit.lua decision, in order.
	f := script.NewFlatReader(reply)
	d := Decision{Policy: p.Name, Algorithm: p.Algorithm, Allowed: f.Flag(), ShadowDenied: f.Flag(),
		Count: f.Int(), Remaining: f.Int(), Limit: f.Int(), WindowMs: p.WindowMs}
	d.ResetAfter = time.Duration(f.Int()) * time.Millisecond
	d.RetryAfter = time.Duration(f.Int()) * time.Millisecond
	d.NowMs = f.Int()
	if err := f.End(); err != nil {
		return Decision{}, fmt.Errorf("%s: decode reply: %w", name, err)
	}
	return d, nil
}

// Inspection is an operator's view of one key.
type Inspection struct {
	Algorithm Algorithm
	// RedisKey is the state key; Type is Redis's TYPE of it ("none" if absent).
	RedisKey, Type string
	// Count is the live usage the algorithm would see now.
	Count int64
	// MemoryUsageBytes is MEMORY USAGE (every element sampled).
	MemoryUsageBytes int64
	// Encoding is OBJECT ENCODING ("unknown" where the store lacks it).
	Encoding string
	// TTLms is PTTL: -2 when the key does not exist, -1 when it has no TTL.
	TTLms int64
}

// Inspect reports a key's live count, memory footprint, encoding and TTL, so
// an operator can size Redis (grpcurl RateLimitService/Inspect).
func (l *Limiter) Inspect(ctx context.Context, policy, key string) (Inspection, error) {
	if err := validate.RateLimitPolicyName("policy", policy); err != nil {
		return Inspection{}, err
	}
	if err := validate.RateLimitStateKey("key", key); err != nil {
		return Inspection{}, err
	}
	p, err := l.Policy(ctx, policy)
	if err != nil {
		return Inspection{}, err
	}
	rk := StateKey(p.Name, key)
	var r struct {
		Type     string `json:"type"`
		Count    int64  `json:"count"`
		Memory   int64  `json:"memory_usage_bytes"`
		Encoding string `json:"encoding"`
		TTL      int64  `json:"ttl_ms"`
	}
	if err := scriptInspect.RunInto(ctx, l.exec, &r, stateKeys{rk},
		inspectArgs{AlgorithmName(p.Algorithm), p.Limit, p.WindowMs}); err != nil {
		return Inspection{}, err
	}
	l.m.inspections.Add(ctx, 1, metric.WithAttributes(attribute.String("policy", p.Name)))
	return Inspection{Algorithm: p.Algorithm, RedisKey: rk, Type: r.Type, Count: r.Count,
		MemoryUsageBytes: r.Memory, Encoding: r.Encoding, TTLms: r.TTL}, nil
}

// metrics of the limiter. Attribute cardinality is bounded: policies by
// MaxPolicies, outcomes and reasons by a fixed set.
type metrics struct {
	decisions     metric.Int64Counter
	nearLimit     metric.Int64Counter
	errors        metric.Int64Counter
	policyChanges metric.Int64Counter
	inspections   metric.Int64Counter
	// guard
	guardDecisions metric.Int64Counter
	guardSkipped   metric.Int64Counter
}

func newMetrics(mp metric.MeterProvider) metrics {
	m := telemetry.Meter(mp, "ratelimit")
	return metrics{
		decisions: telemetry.MustCounter(m, "cycles.ratelimit.decisions",
			"Rate-limit decisions by policy, algorithm and outcome (allowed, denied, shadow_denied)"),
		nearLimit: telemetry.MustCounter(m, "cycles.ratelimit.near_limit",
			"Rate-limit decisions that left a key at >= 80% of its limit"),
		errors: telemetry.MustCounter(m, "cycles.ratelimit.errors",
			"Rate-limit checks that failed (policy missing, invalid, store unavailable)"),
		policyChanges: telemetry.MustCounter(m, "cycles.ratelimit.policy.changes",
			"Rate-limit policies created, updated or deleted"),
		inspections: telemetry.MustCounter(m, "cycles.ratelimit.inspections",
			"Rate-limit keys inspected"),
		guardDecisions: telemetry.MustCounter(m, "cycles.ratelimit.guard.decisions",
			"Guarded RPCs by method and outcome (allowed, denied = RESOURCE_EXHAUSTED)"),
		guardSkipped: telemetry.MustCounter(m, "cycles.ratelimit.guard.skipped",
			"Guard checks skipped because the configured policy does not exist"),
	}
}

// Outcome is the metric label of a decision.
func (d Decision) Outcome() string {
	switch {
	case d.ShadowDenied:
		return "shadow_denied"
	case d.Allowed:
		return "allowed"
	default:
		return "denied"
	}
}

func (m metrics) record(ctx context.Context, d Decision) {
	pol := attribute.String("policy", d.Policy)
	m.decisions.Add(ctx, 1, metric.WithAttributes(pol,
		attribute.String("algorithm", AlgorithmName(d.Algorithm)), attribute.String("outcome", d.Outcome())))
	if d.Limit > 0 && float64(d.Count) >= NearLimitRatio*float64(d.Limit) {
		m.nearLimit.Add(ctx, 1, metric.WithAttributes(pol))
	}
}

func reasonAttr(err error) attribute.KeyValue {
	if e, ok := apierr.As(err); ok {
		return attribute.String("reason", string(e.Code))
	}
	return attribute.String("reason", "internal")
}

func opAttr(op string) metric.AddOption {
	return metric.WithAttributes(attribute.String("op", op))
}
