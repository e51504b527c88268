package ratelimit

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/script"
	"github.com/cyclesgo/cycles-go/internal/validate"
)

// The policy store's scripts (lua/ratelimit/policy_*.lua).
var (
	scriptPolicyPut    = script.Bind[policiesKeys, policyPutArgs]("ratelimit/policy_put")
	scriptPolicyDelete = script.Bind[policiesKeys, policyNameArgs]("ratelimit/policy_delete")
	scriptPolicyGet    = script.Bind[policiesKeys, policyNameArgs]("ratelimit/policy_get")
	scriptPolicyList   = script.Bind[policiesKeys, script.None]("ratelimit/policy_list")
)

// policiesKeys are the policy scripts' KEYS: the policy hash.
type policiesKeys struct {
	Policies string `lua:"policies"`
}

type policyNameArgs struct {
	Name string `lua:"name"`
}

type policyPutArgs struct {
	Name   string `lua:"name"`
	Policy string `lua:"policy"` // JSON
	Mode   string `lua:"mode"`   // create | update
	Max    int    `lua:"max_policies"`
}

// MaxPolicies bounds the policy table, so listing it is one bounded read.
const MaxPolicies = 1000

// Algorithm is a policy's algorithm (the proto enum, shared with the API).
type Algorithm = cyclesv1.Algorithm

// The algorithms.
const (
	SlidingLog    = cyclesv1.Algorithm_ALGORITHM_SLIDING_LOG
	CappedLog     = cyclesv1.Algorithm_ALGORITHM_CAPPED_LOG
	SlidingWindow = cyclesv1.Algorithm_ALGORITHM_SLIDING_WINDOW
	TokenBucket   = cyclesv1.Algorithm_ALGORITHM_TOKEN_BUCKET
	PackedLog     = cyclesv1.Algorithm_ALGORITHM_PACKED_LOG
)

// AlgorithmName is the short name of a ("SLIDING_LOG", ...), used in stored
// policies, scripts and metric attributes.
func AlgorithmName(a Algorithm) string {
	return strings.TrimPrefix(a.String(), "ALGORITHM_")
}

func parseAlgorithm(s string) (Algorithm, bool) {
	v, ok := cyclesv1.Algorithm_value["ALGORITHM_"+s]
	if !ok || v == 0 {
		return 0, false
	}
	return Algorithm(v), true
}

// Policy is a named rate-limit policy.
type Policy struct {
	Name      string
	Algorithm Algorithm
	// Limit is the hits allowed per window (the bucket capacity for TOKEN_BUCKET).
	Limit    int64
	WindowMs int64
	// Cap is CAPPED_LOG's entry bound per key (>= Limit; 0 = 1.2 x Limit).
	Cap int64
	// SlackMs is the key lifetime past the window (>= 10%; 0 = 10%).
	SlackMs int64
	// Shadow decides and counts but never denies.
	Shadow bool
}

// Proto converts p to its API form.
func (p Policy) Proto() *cyclesv1.Policy {
	return &cyclesv1.Policy{Name: p.Name, Algorithm: p.Algorithm, Limit: p.Limit, WindowMs: p.WindowMs,
		Cap: p.Cap, SlackMs: p.SlackMs, Shadow: p.Shadow}
}

// PolicyFromProto converts the API form.
func PolicyFromProto(m *cyclesv1.Policy) Policy {
	return Policy{Name: m.GetName(), Algorithm: m.GetAlgorithm(), Limit: m.GetLimit(), WindowMs: m.GetWindowMs(),
		Cap: m.GetCap(), SlackMs: m.GetSlackMs(), Shadow: m.GetShadow()}
}

// withDefaults validates p (the one validation path, internal/validate) and fills
// the defaults: cap = ceil(1.2 x limit) for CAPPED_LOG, slack = ceil(10% of
// the window). Stored policies always carry resolved values.
func (p Policy) withDefaults() (Policy, error) {
	if err := validate.RateLimitPolicy("policy", p.Proto()); err != nil {
		return Policy{}, err
	}
	if p.Algorithm == CappedLog && p.Cap == 0 {
		p.Cap = (p.Limit*6 + 4) / 5
	}
	if p.SlackMs == 0 {
		p.SlackMs = validate.MinSlackMs(p.WindowMs)
	}
	return p, nil
}

// TTL is how long a key of p lives after its last served request: the window
// plus slack, and one more window for SLIDING_WINDOW, whose previous window's
// count is read during the whole current one.
func (p Policy) TTL() time.Duration {
	ms := p.WindowMs + p.SlackMs
	if p.Algorithm == SlidingWindow {
		ms += p.WindowMs
	}
	return time.Duration(ms) * time.Millisecond
}

// storedPolicy is the JSON form in keys.RateLimitPolicies.
type storedPolicy struct {
	Name      string `json:"name"`
	Algorithm string `json:"algorithm"`
	Limit     int64  `json:"limit"`
	WindowMs  int64  `json:"window_ms"`
	Cap       int64  `json:"cap"`
	SlackMs   int64  `json:"slack_ms"`
	Shadow    bool   `json:"shadow"`
}

func (p Policy) marshal() (string, error) {
	b, err := json.Marshal(storedPolicy{Name: p.Name, Algorithm: AlgorithmName(p.Algorithm), Limit: p.Limit,
		WindowMs: p.WindowMs, Cap: p.Cap, SlackMs: p.SlackMs, Shadow: p.Shadow})
	return string(b), err
}

func unmarshalPolicy(raw []byte) (Policy, error) {
	var s storedPolicy
	if err := json.Unmarshal(raw, &s); err != nil {
		return Policy{}, fmt.Errorf("decode stored policy: %w", err)
	}
	alg, ok := parseAlgorithm(s.Algorithm)
	if !ok {
		return Policy{}, fmt.Errorf("stored policy %q: unknown algorithm %q", s.Name, s.Algorithm)
	}
	return Policy{Name: s.Name, Algorithm: alg, Limit: s.Limit, WindowMs: s.WindowMs, Cap: s.Cap,
		SlackMs: s.SlackMs, Shadow: s.Shadow}, nil
}

// CreatePolicy stores a new policy; DUPLICATE_RESOURCE when the name exists.
func (l *Limiter) CreatePolicy(ctx context.Context, p Policy) (Policy, error) {
	return l.putPolicy(ctx, p, "create")
}

// UpdatePolicy replaces an existing policy; POLICY_NOT_FOUND otherwise. This
// replica sees the change at once, others within Options.PolicyCacheTTL.
func (l *Limiter) UpdatePolicy(ctx context.Context, p Policy) (Policy, error) {
	return l.putPolicy(ctx, p, "update")
}

func (l *Limiter) putPolicy(ctx context.Context, p Policy, mode string) (Policy, error) {
	p, err := p.withDefaults()
	if err != nil {
		return Policy{}, err
	}
	body, err := p.marshal()
	if err != nil {
		return Policy{}, err
	}
	if err := scriptPolicyPut.RunInto(ctx, l.exec, nil, policiesKeys{keys.RateLimitPolicies},
		policyPutArgs{p.Name, body, mode, MaxPolicies}); err != nil {
		return Policy{}, err
	}
	l.cache.put(p.Name, p, true, time.Now().Add(l.opts.PolicyCacheTTL))
	l.m.policyChanges.Add(ctx, 1, opAttr(mode))
	return p, nil
}

// DeletePolicy removes a policy; POLICY_NOT_FOUND when absent. Keys under it
// expire by themselves within window + slack.
func (l *Limiter) DeletePolicy(ctx context.Context, name string) error {
	if err := validate.RateLimitPolicyName("name", name); err != nil {
		return err
	}
	if err := scriptPolicyDelete.RunInto(ctx, l.exec, nil, policiesKeys{keys.RateLimitPolicies}, policyNameArgs{name}); err != nil {
		return err
	}
	l.cache.forget(name)
	l.m.policyChanges.Add(ctx, 1, opAttr("delete"))
	return nil
}

// GetPolicy reads a policy from Redis (never from the cache).
func (l *Limiter) GetPolicy(ctx context.Context, name string) (Policy, error) {
	if err := validate.RateLimitPolicyName("name", name); err != nil {
		return Policy{}, err
	}
	raw, err := scriptPolicyGet.Run(ctx, l.exec, policiesKeys{keys.RateLimitPolicies}, policyNameArgs{name})
	if err != nil {
		return Policy{}, err
	}
	return unmarshalPolicy(raw)
}

// ListPolicies returns every policy, sorted by name.
func (l *Limiter) ListPolicies(ctx context.Context) ([]Policy, error) {
	raw, err := scriptPolicyList.Run(ctx, l.exec, policiesKeys{keys.RateLimitPolicies}, script.None{})
	if err != nil {
		return nil, err
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf("decode policy list: %w", err)
	}
	out := make([]Policy, 0, len(items))
	for _, it := range items {
		p, err := unmarshalPolicy(it)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Policy returns the policy Check would use: from the in-process cache while
// fresh, else from Redis. A missing policy is cached too (briefly), so a
// misconfigured guard does not turn every request into a Redis read.
func (l *Limiter) Policy(ctx context.Context, name string) (Policy, error) {
	now := time.Now()
	if p, found, ok := l.cache.get(name, now); ok {
		if !found {
			return Policy{}, notFound(name)
		}
		return p, nil
	}
	p, err := l.GetPolicy(ctx, name)
	if err != nil && !apierr.HasCode(err, apierr.PolicyNotFound) {
		return Policy{}, err // store errors are not cached
	}
	l.cache.put(name, p, err == nil, now.Add(l.opts.PolicyCacheTTL))
	return p, err
}

func notFound(name string) error {
	return apierr.New(apierr.PolicyNotFound, "no policy %s", name).With("policy", name)
}

// policyCache is the short-lived in-process policy cache of one Limiter.
type policyCache struct {
	mu      sync.RWMutex
	entries map[string]cacheEntry
}

type cacheEntry struct {
	p       Policy
	found   bool
	expires time.Time
}

// get returns the cached policy, whether it exists, and whether the entry is fresh.
func (c *policyCache) get(name string, now time.Time) (p Policy, found, fresh bool) {
	c.mu.RLock()
	e, ok := c.entries[name]
	c.mu.RUnlock()
	if !ok || !now.Before(e.expires) {
		return Policy{}, false, false
	}
	return e.p, e.found, true
}

func (c *policyCache) put(name string, p Policy, found bool, expires time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= 4*MaxPolicies {
		// Unknown names are cached too; never let them grow the map unbounded.
		c.entries = make(map[string]cacheEntry, MaxPolicies)
	}
	c.entries[name] = cacheEntry{p: p, found: found, expires: expires}
}

func (c *policyCache) forget(name string) {
	c.mu.Lock()
	delete(c.entries, name)
	c.mu.Unlock()
}
