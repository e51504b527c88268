package script

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/cyclesgo/cycles-go/internal/store/redisinfo"
)

// How a script call reaches Redis.
//
// EVALSHA (the embedded store, Redis 6, and Redis 7 without WithFunctions)
// runs the whole compiled source on every call: int64.lua, core.lua and the
// included libraries define their ~35 closures and tables again each time
// before the body runs. Redis 7 Functions (WithFunctions) load each script
// once per master in one library (FUNCTION LOAD; compile.go link): the
// Lua libraries are defined then, once for all scripts, and FCALL runs
// only the script's body. Both come from the same Lua text
// (compile.go). Functions are kept by Redis across FLUSHALL, restarts (RDB,
// AOF) and failovers (replicated); a missing one ("Function not found":
// FUNCTION FLUSH, a new empty node) is loaded again and the call retried
// once, as EVALSHA falls back to EVAL on NOSCRIPT.

// runner sends one compiled script.
type runner interface {
	// do runs the script, loading it first when Redis does not have it.
	do(ctx context.Context, c redis.UniversalClient, keys []string, args []any) (any, error)
	// queue adds the script call to a pipeline (no load on a miss: the
	// pipeliner retries a missing one with do).
	queue(ctx context.Context, p redis.Pipeliner, keys []string, args []any) *redis.Cmd
}

type evalRunner struct{ s *redis.Script }

func (r evalRunner) do(ctx context.Context, c redis.UniversalClient, keys []string, args []any) (any, error) {
	// EVALSHA, falling back to EVAL (which reloads) on NOSCRIPT.
	return r.s.Run(ctx, c, keys, args...).Result()
}

func (r evalRunner) queue(ctx context.Context, p redis.Pipeliner, keys []string, args []any) *redis.Cmd {
	return r.s.EvalSha(ctx, p, keys, args...)
}

type fnRunner struct{ p *program }

func (r fnRunner) do(ctx context.Context, c redis.UniversalClient, keys []string, args []any) (any, error) {
	res, err := c.FCall(ctx, r.p.fn, keys, args...).Result()
	if err != nil && isMissing(err) {
		if lerr := loadLibrary(ctx, c, r.p); lerr != nil {
			return nil, lerr
		}
		res, err = c.FCall(ctx, r.p.fn, keys, args...).Result()
	}
	return res, err
}

func (r fnRunner) queue(ctx context.Context, p redis.Pipeliner, keys []string, args []any) *redis.Cmd {
	return p.FCall(ctx, r.p.fn, keys, args...)
}

// isMissing reports whether Redis does not know the script or function.
func isMissing(err error) bool {
	msg := err.Error()
	return strings.HasPrefix(msg, "NOSCRIPT") || strings.Contains(msg, "Function not found")
}

// loadLibrary loads the library holding p's function on every master.
func loadLibrary(ctx context.Context, c redis.UniversalClient, p *program) error {
	return redisinfo.ForEachMaster(ctx, c, func(ctx context.Context, n redis.Cmdable) error {
		if err := n.FunctionLoadReplace(ctx, p.lib.src).Err(); err != nil {
			return fmt.Errorf("function load %s (for %s): %w", p.lib.name, p.name, err)
		}
		return nil
	})
}

// libraryPrefix starts the name of every library cyclesd loads.
const libraryPrefix = "cy_"

// pruneLibraries deletes the cyclesd libraries on n that ps does not hold:
// those of earlier versions, so they do not pile up deploy after deploy. An
// older cyclesd still running (a rolling deploy) loads its own again on its
// next call of each.
func pruneLibraries(ctx context.Context, n redis.Cmdable, ps programs) error {
	keep := make(map[string]bool, 1)
	for _, p := range ps {
		keep[p.lib.name] = true
	}
	libs, err := n.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: libraryPrefix + "*"}).Result()
	if err != nil {
		return fmt.Errorf("function list: %w", err)
	}
	for _, l := range libs {
		if !keep[l.Name] {
			if err := n.FunctionDelete(ctx, l.Name).Err(); err != nil && !strings.Contains(err.Error(), "not exist") {
				return fmt.Errorf("function delete %s: %w", l.Name, err)
			}
		}
	}
	return nil
}
