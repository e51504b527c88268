// Package envoyrls serves Envoy's rate limit API
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) on top of
// internal/ratelimit, so an Envoy proxy can use cyclesd as its rate limit service.
//
// Each request descriptor is matched against the configured rules (domain +
// the descriptor's entry keys in order, optionally pinned values); the first
// matching rule names the policy, and the descriptor's entries name the key:
//
//	envoy/<domain>/<key1>=<value1>/<key2>=<value2>...
//
// with every byte outside [A-Za-z0-9_.:@+~-] percent-encoded (so no value can
// collide with another or leave the Redis hash tag), hashed (SHA-256) when
// longer than the limiter allows. Descriptors that match no rule are OK and
// count nothing, like Envoy's reference service. Shadow policies answer OK.
//
// Envoy reaches cyclesd like any client: the RPC needs the admin key (set it
// in the rate limit filter's grpc_service.initial_metadata as
// x-cycles-admin-key). Store failures return UNAVAILABLE, so Envoy's
// failure_mode_deny decides; hits_addend larger than the limit is OVER_LIMIT
// (it can never pass); negative hits (refunds) and per-descriptor limit
// overrides are ignored.
package envoyrls

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	rlsv3common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/ratelimit"
	"github.com/cyclesgo/cycles-go/internal/telemetry"
	"github.com/cyclesgo/cycles-go/internal/validate"
)

// Request bounds (Envoy sends a handful of short descriptors per request).
const (
	MaxDescriptors = 64
	MaxEntries     = 16
	MaxFieldLen    = 512
)

// Rule maps descriptors to a policy.
type Rule struct {
	// Domain must equal the request's domain.
	Domain string `json:"domain"`
	// Keys are the descriptor's entry keys, in order (e.g. ["remote_address"]
	// or ["generic_key", "path"]); the descriptor must have exactly these.
	Keys []string `json:"keys"`
	// Values optionally pins entry values (entry key -> exact value).
	Values map[string]string `json:"values,omitempty"`
	// Policy is the rate-limit policy applied to matching descriptors.
	Policy string `json:"policy"`
}

// Config is the descriptor -> policy mapping; the first matching rule wins.
// JSON form (cyclesd's Envoy RLS config file):
//
//	{"rules": [
//	  {"domain": "edge", "keys": ["generic_key", "path"], "values": {"generic_key": "login"}, "policy": "login"},
//	  {"domain": "edge", "keys": ["remote_address"], "policy": "per-ip"}
//	]}
type Config struct {
	Rules []Rule `json:"rules"`
}

// Validate checks the configuration at start-up.
func (c Config) Validate() error {
	for i, r := range c.Rules {
		if r.Domain == "" || len(r.Keys) == 0 || len(r.Keys) > MaxEntries {
			return fmt.Errorf("envoy rule %d: domain and 1..%d keys are required", i, MaxEntries)
		}
		if err := validate.RateLimitPolicyName("policy", r.Policy); err != nil {
			return fmt.Errorf("envoy rule %d: %w", i, err)
		}
		for k := range r.Values {
			if !slices.Contains(r.Keys, k) {
				return fmt.Errorf("envoy rule %d: pinned value for %q, which is not one of its keys", i, k)
			}
		}
	}
	return nil
}

// Server implements rlsv3.RateLimitServiceServer.
type Server struct {
	rlsv3.UnimplementedRateLimitServiceServer
	limiter   *ratelimit.Limiter
	cfg       Config
	decisions metric.Int64Counter
}

// New returns the Envoy RLS server (the config is validated).
func New(l *ratelimit.Limiter, cfg Config, mp metric.MeterProvider) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := telemetry.Meter(mp, "envoyrls")
	return &Server{limiter: l, cfg: cfg, decisions: telemetry.MustCounter(m, "cycles.ratelimit.envoy.descriptors",
		"Envoy rate-limit descriptors answered, by configured domain and code (OK, OVER_LIMIT, UNMATCHED)")}, nil
}

// Register adds the service to g (for server.Services.Register).
func (s *Server) Register(g *grpc.Server) { rlsv3.RegisterRateLimitServiceServer(g, s) }

// ShouldRateLimit decides every descriptor; the overall code is OVER_LIMIT
// when any descriptor is.
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if err := checkRequest(req); err != nil {
		return nil, err
	}
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	for _, desc := range req.GetDescriptors() {
		st, err := s.decide(ctx, req, desc)
		if err != nil {
			if ae, ok := apierr.As(err); ok {
				return nil, ae.Status("", "").Err()
			}
			return nil, status.Error(codes.Internal, "rate limit check failed")
		}
		if st.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		resp.Statuses = append(resp.Statuses, st)
	}
	return resp, nil
}

func (s *Server) decide(ctx context.Context, req *rlsv3.RateLimitRequest, desc *rlsv3common.RateLimitDescriptor) (*rlsv3.RateLimitResponse_DescriptorStatus, error) {
	rule := s.match(req.GetDomain(), desc)
	if rule == nil || desc.GetIsNegativeHits() {
		s.count(ctx, "", "UNMATCHED")
		return &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}, nil
	}
	hits := int64(req.GetHitsAddend())
	if h := desc.GetHitsAddend(); h != nil {
		hits = int64(min(h.GetValue(), 1<<53))
	}
	if hits == 0 {
		hits = 1
	}
	p, err := s.limiter.Policy(ctx, rule.Policy)
	if err != nil {
		return nil, err
	}
	if hits > p.Limit {
		s.count(ctx, rule.Domain, "OVER_LIMIT")
		return &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OVER_LIMIT,
			CurrentLimit: currentLimit(p.Name, p.Limit, p.WindowMs)}, nil
	}
	d, err := s.limiter.Check(ctx, rule.Policy, Key(req.GetDomain(), desc), hits)
	if err != nil {
		return nil, err
	}
	code := rlsv3.RateLimitResponse_OK
	if !d.Allowed {
		code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	s.count(ctx, rule.Domain, code.String())
	return &rlsv3.RateLimitResponse_DescriptorStatus{
		Code:               code,
		CurrentLimit:       currentLimit(d.Policy, d.Limit, d.WindowMs),
		LimitRemaining:     uint32(min(d.Remaining, 1<<32-1)),
		DurationUntilReset: durationpb.New(d.ResetAfter),
	}, nil
}

func (s *Server) count(ctx context.Context, domain, code string) {
	s.decisions.Add(ctx, 1, metric.WithAttributes(attribute.String("domain", domain), attribute.String("code", code)))
}

// match returns the first rule for domain whose keys (and pinned values)
// the descriptor has, in order.
func (s *Server) match(domain string, desc *rlsv3common.RateLimitDescriptor) *Rule {
	entries := desc.GetEntries()
rules:
	for i := range s.cfg.Rules {
		r := &s.cfg.Rules[i]
		if r.Domain != domain || len(r.Keys) != len(entries) {
			continue
		}
		for j, e := range entries {
			if e.GetKey() != r.Keys[j] {
				continue rules
			}
			if v, pinned := r.Values[e.GetKey()]; pinned && v != e.GetValue() {
				continue rules
			}
		}
		return r
	}
	return nil
}

// Key is the limiter key of a descriptor in domain.
func Key(domain string, desc *rlsv3common.RateLimitDescriptor) string {
	var b strings.Builder
	b.WriteString("envoy/")
	escape(&b, domain)
	for _, e := range desc.GetEntries() {
		b.WriteByte('/')
		escape(&b, e.GetKey())
		b.WriteByte('=')
		escape(&b, e.GetValue())
	}
	k := b.String()
	if len(k) > 2*validate.MaxRateLimitKeyLen {
		sum := sha256.Sum256([]byte(k))
		return "envoy/h/" + hex.EncodeToString(sum[:])
	}
	return k
}

func escape(b *strings.Builder, s string) {
	const hexdigits = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			strings.IndexByte("_.:@+~-", c) >= 0 {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexdigits[c>>4])
		b.WriteByte(hexdigits[c&15])
	}
}

// currentLimit is the descriptor's limit in Envoy's terms: windows of exactly
// one second, minute, hour or day map to that unit, others to UNKNOWN with
// the policy name carrying the window.
func currentLimit(name string, limit, windowMs int64) *rlsv3.RateLimitResponse_RateLimit {
	unit := rlsv3.RateLimitResponse_RateLimit_UNKNOWN
	switch windowMs {
	case 1000:
		unit = rlsv3.RateLimitResponse_RateLimit_SECOND
	case 60_000:
		unit = rlsv3.RateLimitResponse_RateLimit_MINUTE
	case 3_600_000:
		unit = rlsv3.RateLimitResponse_RateLimit_HOUR
	case 86_400_000:
		unit = rlsv3.RateLimitResponse_RateLimit_DAY
	}
	return &rlsv3.RateLimitResponse_RateLimit{Name: name, RequestsPerUnit: uint32(min(limit, 1<<32-1)), Unit: unit}
}

// checkRequest validates the shape (this service is outside cycles.v1, so
// it validates itself).
func checkRequest(req *rlsv3.RateLimitRequest) error {
	bad := func(format string, args ...any) error {
		return apierr.New(apierr.InvalidRequest, format, args...).Status("", "").Err()
	}
	if req.GetDomain() == "" || len(req.GetDomain()) > MaxFieldLen {
		return bad("domain: 1..%d bytes required", MaxFieldLen)
	}
	if n := len(req.GetDescriptors()); n == 0 || n > MaxDescriptors {
		return bad("descriptors: 1..%d required", MaxDescriptors)
	}
	for i, d := range req.GetDescriptors() {
		if n := len(d.GetEntries()); n == 0 || n > MaxEntries {
			return bad("descriptors[%d]: 1..%d entries required", i, MaxEntries)
		}
		for _, e := range d.GetEntries() {
			if e.GetKey() == "" || len(e.GetKey()) > MaxFieldLen || len(e.GetValue()) > MaxFieldLen {
				return bad("descriptors[%d]: entry keys 1..%d and values up to %d bytes", i, MaxFieldLen, MaxFieldLen)
			}
		}
	}
	return nil
}
