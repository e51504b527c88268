// Package scripttest builds script executors for the domain suites in the
// mode production runs on each test backend: Redis 7 Functions (FCALL) on the
// real Redis leg of redistest.Backends, EVALSHA on the embedded store.
package scripttest

import (
	"testing"

	"github.com/cyclesgo/cycles-go/internal/script"
	"github.com/cyclesgo/cycles-go/test/redistest"
)

// Options are the executor options cyclesd would use on be's server
// (internal/app: WithFunctions on Redis 7), followed by extra.
func Options(be redistest.Backend, extra ...script.Option) []script.Option {
	var opts []script.Option
	if be.Functions {
		opts = append(opts, script.WithFunctions())
	}
	return append(opts, extra...)
}

// New compiles every script into an executor on be in its production mode.
func New(tb testing.TB, be redistest.Backend, extra ...script.Option) *script.Executor {
	tb.Helper()
	ex, err := script.New(be.Client, Options(be, extra...)...)
	if err != nil {
		tb.Fatalf("script executor: %v", err)
	}
	return ex
}

// Shared compiles every script into an executor on the shared real backend
// (redistest.SharedBackend) in its production mode.
func Shared(tb testing.TB, extra ...script.Option) *script.Executor {
	tb.Helper()
	return New(tb, redistest.SharedBackend(tb), extra...)
}
