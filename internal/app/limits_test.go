package app

import (
	"reflect"
	"testing"

	"github.com/cyclesgo/cycles-go/internal/config"
	"github.com/cyclesgo/cycles-go/internal/events"
	"github.com/cyclesgo/cycles-go/internal/ratelimit"
	"github.com/cyclesgo/cycles-go/internal/server"
)

// The flags' defaults (internal/config, a leaf package) must be the server's own
// defaults (internal/server), so a deployment without flags runs with exactly the
// limits docs/limits.md lists, whichever package a reader looks at.
func TestLimitFlagDefaultsAreTheServerDefaults(t *testing.T) {
	cfg, err := config.Load(nil, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	got, want := limits(cfg), server.DefaultLimits()
	got.PreAuth.MaxPeers = want.PreAuth.MaxPeers // no flag: the server's default applies
	// The connection guard's timeouts and the public-stream limits have no
	// flags either
	// (docs/limits.md lists them as fixed).
	got.FirstStreamTimeout, got.WriteStallTimeout = want.FirstStreamTimeout, want.WriteStallTimeout
	got.PublicStreamsPerConn, got.PublicStreamsTotal = want.PublicStreamsPerConn, want.PublicStreamsTotal
	got.PublicAwaitingPerConn, got.PublicAwaitingTotal, got.PublicRecvTimeout = want.PublicAwaitingPerConn, want.PublicAwaitingTotal, want.PublicRecvTimeout
	if !reflect.DeepEqual(got, want) {
		t.Errorf("flag defaults give\n%+v\nserver defaults are\n%+v", got, want)
	}
	http := server.DefaultHTTPOptions()
	if cfg.HTTPMaxConnections != http.MaxConnections || int64(cfg.HTTPMaxBodyBytes) != http.MaxBodyBytes {
		t.Errorf("HTTP flag defaults %d connections / %d bytes; server defaults %d / %d",
			cfg.HTTPMaxConnections, cfg.HTTPMaxBodyBytes, http.MaxConnections, http.MaxBodyBytes)
	}
}

// The guard is on by default with the policy cyclesd creates at start, and
// the replay pacing flags default to the events package's rates.
func TestGuardAndPacingDefaults(t *testing.T) {
	cfg, err := config.Load(nil, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if cfg.GuardPolicy != ratelimit.DefaultGuardPolicyName {
		t.Errorf("-guard-policy defaults to %q, want %q", cfg.GuardPolicy, ratelimit.DefaultGuardPolicyName)
	}
	if cfg.WatchStreamRate != events.DefaultStreamEventsPerSecond || cfg.WatchTenantRate != events.DefaultTenantEventsPerSecond {
		t.Errorf("pacing flags default to %d / %d, want %d / %d", cfg.WatchStreamRate, cfg.WatchTenantRate,
			events.DefaultStreamEventsPerSecond, events.DefaultTenantEventsPerSecond)
	}
	if cfg.WatchFeedStreamRate != events.DefaultFeedStreamEventsPerSecond || cfg.WatchFeedRate != events.DefaultFeedEventsPerSecond {
		t.Errorf("feed pacing flags default to %d / %d, want %d / %d", cfg.WatchFeedStreamRate, cfg.WatchFeedRate,
			events.DefaultFeedStreamEventsPerSecond, events.DefaultFeedEventsPerSecond)
	}
}
