package envoyrls

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	rlsv3common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/cyclesgo/cycles-go/internal/ratelimit"
	"github.com/cyclesgo/cycles-go/internal/server"
	"github.com/cyclesgo/cycles-go/internal/telemetry/telemetrytest"
	"github.com/cyclesgo/cycles-go/test/grpctest"
	"github.com/cyclesgo/cycles-go/test/scripttest"
)

func uniq(p string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return p + "-" + hex.EncodeToString(b)
}

func desc(kv ...string) *rlsv3common.RateLimitDescriptor {
	d := &rlsv3common.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlsv3common.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// A real Envoy RateLimitRequest, built from go-control-plane's types and sent
// over gRPC, is answered per descriptor with Envoy's codes and limits.
func TestShouldRateLimit(t *testing.T) {
	ex := scripttest.Shared(t)
	tel := telemetrytest.New()
	lim := ratelimit.New(ex, ratelimit.Options{MeterProvider: tel.Provider})
	ctx := context.Background()
	perIP, err := lim.CreatePolicy(ctx, ratelimit.Policy{Name: uniq("ip"), Algorithm: ratelimit.PackedLog, Limit: 2, WindowMs: 60_000})
	if err != nil {
		t.Fatal(err)
	}
	login, err := lim.CreatePolicy(ctx, ratelimit.Policy{Name: uniq("login"), Algorithm: ratelimit.TokenBucket, Limit: 100, WindowMs: 1000})
	if err != nil {
		t.Fatal(err)
	}
	domain := uniq("edge")
	srv, err := New(lim, Config{Rules: []Rule{
		{Domain: domain, Keys: []string{"generic_key", "path"}, Values: map[string]string{"generic_key": "login"}, Policy: login.Name},
		{Domain: domain, Keys: []string{"remote_address"}, Policy: perIP.Name},
	}}, tel.Provider)
	if err != nil {
		t.Fatal(err)
	}
	// Served behind the production chain: Envoy sends the admin key through
	// its grpc_service initial_metadata.
	conn := grpctest.Start(t, server.Services{Register: srv.Register})
	c := rlsv3.NewRateLimitServiceClient(conn)
	if _, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("without the admin key: %v, want UNAUTHENTICATED", err)
	}
	ctx = grpctest.AsAdmin(ctx)

	req := &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*rlsv3common.RateLimitDescriptor{
		desc("remote_address", "10.0.0.1"),
		desc("generic_key", "login", "path", "/v1/login?x={y} z"),
		desc("unknown", "x"),
	}}
	for i := 0; i < 2; i++ {
		resp, err := c.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || len(resp.GetStatuses()) != 3 {
			t.Fatalf("call %d: %v", i, resp)
		}
		ip := resp.GetStatuses()[0]
		if ip.GetLimitRemaining() != uint32(1-i) || ip.GetCurrentLimit().GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE ||
			ip.GetCurrentLimit().GetRequestsPerUnit() != 2 || ip.GetDurationUntilReset().AsDuration() != time.Minute {
			t.Fatalf("call %d ip status: %v", i, ip)
		}
		if u := resp.GetStatuses()[1].GetCurrentLimit().GetUnit(); u != rlsv3.RateLimitResponse_RateLimit_SECOND {
			t.Fatalf("login unit %v", u)
		}
		if resp.GetStatuses()[2].GetCurrentLimit() != nil {
			t.Fatalf("unmatched descriptor got a limit: %v", resp.GetStatuses()[2])
		}
	}
	resp, err := c.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT || resp.GetStatuses()[0].GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT ||
		resp.GetStatuses()[1].GetCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("3rd call: %v", resp)
	}
	// Another address is its own key; hits_addend counts as cost, and a cost
	// above the limit is OVER_LIMIT without being counted.
	other := &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: 2, Descriptors: []*rlsv3common.RateLimitDescriptor{desc("remote_address", "10.0.0.2")}}
	if resp, err := c.ShouldRateLimit(ctx, other); err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || resp.GetStatuses()[0].GetLimitRemaining() != 0 {
		t.Fatalf("other address with hits 2: %v %v", resp, err)
	}
	big := desc("remote_address", "10.0.0.3")
	big.HitsAddend = wrapperspb.UInt64(3)
	if resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*rlsv3common.RateLimitDescriptor{big}}); err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("cost above the limit: %v %v", resp, err)
	}
	// The state lives under the escaped descriptor key.
	in, err := lim.Inspect(ctx, perIP.Name, Key(domain, desc("remote_address", "10.0.0.1")))
	if err != nil || in.Count != 2 {
		t.Fatalf("inspect: %+v %v", in, err)
	}
	if k := Key("d", desc("path", "/a {b}\n")); strings.ContainsAny(k, "{} \n") || k != "envoy/d/path=%2Fa%20%7Bb%7D%0A" {
		t.Fatalf("escaped key %q", k)
	}
	// Malformed requests are INVALID_ARGUMENT.
	if _, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("no descriptors: %v", err)
	}
	if got := tel.Sum(t, "cycles.ratelimit.envoy.descriptors", attribute.String("domain", domain), attribute.String("code", "OVER_LIMIT")); got != 2 {
		t.Fatalf("OVER_LIMIT descriptors = %d, want 2", got)
	}
	if got := tel.Sum(t, "cycles.ratelimit.envoy.descriptors", attribute.String("code", "UNMATCHED")); got != 3 {
		t.Fatalf("UNMATCHED descriptors = %d, want 3", got)
	}
}

func TestConfigJSON(t *testing.T) {
	var c Config
	raw := `{"rules": [{"domain": "edge", "keys": ["generic_key", "path"], "values": {"generic_key": "login"}, "policy": "login"},
		{"domain": "edge", "keys": ["remote_address"], "policy": "per-ip"}]}`
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		t.Fatal(err)
	}
	if len(c.Rules) != 2 || c.Rules[0].Values["generic_key"] != "login" || c.Rules[1].Policy != "per-ip" || c.Validate() != nil {
		t.Fatalf("decoded %+v", c)
	}
}

func TestConfigValidation(t *testing.T) {
	for _, c := range []Config{
		{Rules: []Rule{{Keys: []string{"a"}, Policy: "p"}}},
		{Rules: []Rule{{Domain: "d", Policy: "p"}}},
		{Rules: []Rule{{Domain: "d", Keys: []string{"a"}, Policy: "bad name"}}},
		{Rules: []Rule{{Domain: "d", Keys: []string{"a"}, Values: map[string]string{"b": "x"}, Policy: "p"}}},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v: accepted", c)
		}
	}
}
