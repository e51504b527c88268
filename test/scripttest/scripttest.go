// Package scripttest builds script executors for the suites in the mode
// production runs on each test backend: Redis 7 Functions (FCALL) on a real
// Redis 7 server or Cluster, EVALSHA on the embedded store (and on Redis
// before 7). It is the one way a test gets an executor; the exceptions are
// suites that need one particular mode (internal/script's own over
// redistest.AllModes, and the few named in TestOneWayToAnExecutor).
package scripttest

import (
	"testing"

	"github.com/redis/go-redis/v9"

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

// On compiles every script into an executor on c in the mode cyclesd would
// use on c's server (redistest.BackendOn): FCALL when every master behind c
// runs Redis 7, EVALSHA on the embedded store.
func On(tb testing.TB, c redis.UniversalClient, extra ...script.Option) *script.Executor {
	tb.Helper()
	return New(tb, redistest.BackendOn(tb, c), extra...)
}

// Shared compiles every script into an executor on the shared real backend
// (redistest.SharedBackend) in its production mode.
func Shared(tb testing.TB, extra ...script.Option) *script.Executor {
	tb.Helper()
	return New(tb, redistest.SharedBackend(tb), extra...)
}
