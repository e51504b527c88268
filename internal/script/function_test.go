package script

import (
	"context"
	"fmt"
	"io/fs"
	"regexp"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/cyclesgo/cycles-go/lua"
	"github.com/cyclesgo/cycles-go/test/redistest"
)

// Every script loads as a Redis 7 Function (Lua's limits, e.g. 60 upvalues
// per function, bind the body differently than in an EVAL chunk), and a
// second Load deletes nothing of the current set.
func TestEveryScriptLoadsAsFunction(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ex, err := New(c, WithFunctions())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		if err := ex.Load(ctx); err != nil {
			t.Fatalf("load %d: %v", i, err)
		}
	}
	libs, err := c.FunctionList(ctx, redisFunctionQuery()).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(libs) != 1 || len(libs[0].Functions) != len(ex.Names()) {
		t.Fatalf("%d libraries loaded, want 1 registering the %d scripts", len(libs), len(ex.Names()))
	}
	for _, name := range ex.Names() {
		if p := ex.progs[name]; p.fn == "" || ex.sources[name] != p.lib.src {
			t.Fatalf("%s: not sent as a function", name)
		}
	}
}

func redisFunctionQuery() redis.FunctionListQuery {
	return redis.FunctionListQuery{LibraryNamePattern: libraryPrefix + "*"}
}

// stateProbe emits an event when asked, and reads a key through a library
// helper that uses the KEYS global (as lib/ledger_check.lua does).
const stateProbe = `
local function first_key() return KEYS[1] end
if ARGV[1] == 'emit' then
  event_emitter(KEYS[1], ARGV[2], now_ms())('budget.exhausted', 'budget', 'tenant:a', {})
end
return ok({key = first_key(), arg = ARGV[1]})
`

// A function keeps no per-call state: the event a call appended is not
// reported again by the next call of the same function, and KEYS/ARGV are
// each call's own, in the body and in helpers defined outside it.
func TestFunctionCallsShareNoState(t *testing.T) {
	srv := redistest.Start(t)
	ex := probeExec(t, srv.Client(t), map[string]string{"test/state": stateProbe})
	WithFunctions()(ex)
	ex.prepare()
	var hooked []string
	ex.SetEventHook(func(stream, id string) { hooked = append(hooked, stream+" "+id) })
	ctx := context.Background()
	ectx := `{"base":"00112233445566","retention_ms":604800000,"actor":"system","key_id":"","request_id":"","trace_id":""}`
	for i, c := range []struct {
		key, arg string
		hooks    int
	}{{"cy:{t:a}:events", "emit", 1}, {"cy:{t:b}:events", "quiet", 1}, {"cy:{t:c}:events", "emit", 2}} {
		var out struct{ Key, Arg string }
		if err := ex.RunInto(ctx, &out, def("test/state"), []string{c.key}, c.arg, ectx); err != nil {
			t.Fatal(err)
		}
		if out.Key != c.key || out.Arg != c.arg {
			t.Fatalf("call %d saw key %q arg %q, want %q %q", i, out.Key, out.Arg, c.key, c.arg)
		}
		if len(hooked) != c.hooks {
			t.Fatalf("call %d: hook calls %v, want %d", i, hooked, c.hooks)
		}
	}
	if n, _ := srv.Client(t).FunctionList(ctx, redisFunctionQuery()).Result(); len(n) != 1 {
		t.Fatalf("%d libraries after lazy loading, want 1 (test/state)", len(n))
	}
}

// At maxmemory (noeviction) a Function flagged allow-oom or no-writes runs;
// one without flags is refused before it starts, as STORE_FULL.
func TestFunctionFlagsWhenFull(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Args: []string{"--maxmemory-policy", "noeviction"}})
	c := srv.Client(t)
	ex, err := newWith(c, map[string]string{
		"test/write":  "redis.call('INCR', KEYS[1])\nreturn ok({})",
		"test/oom":    "#!lua flags=allow-oom\nredis.call('INCR', KEYS[1])\nreturn ok({})",
		"test/reader": "#!lua flags=no-writes\nreturn ok({v = redis.call('GET', KEYS[1])})",
	})
	if err != nil {
		t.Fatal(err)
	}
	WithFunctions()(ex)
	ex.prepare()
	ctx := context.Background()
	if err := ex.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.ConfigSet(context.Background(), "maxmemory", "0") })
	key := []string{"cy:{t:full}:n"}
	if _, err := ex.Run(ctx, def("test/write"), key); !strings.HasPrefix(fmt.Sprint(err), "STORE_FULL") {
		t.Fatalf("unflagged write on a full Redis: %v, want STORE_FULL", err)
	}
	if _, err := ex.Run(ctx, def("test/oom"), key); err != nil {
		t.Fatalf("allow-oom on a full Redis: %v", err)
	}
	var out struct{ V string }
	if err := ex.RunInto(ctx, &out, def("test/reader"), key); err != nil || out.V != "1" {
		t.Fatalf("no-writes on a full Redis: %+v %v", out, err)
	}
}

// topLevelName matches a library file's top-level definitions ("local
// function f", "local a, b =").
var topLevelName = regexp.MustCompile(`(?m)^local (?:function )?([A-Za-z_][A-Za-z_0-9]*(?:\s*,\s*[A-Za-z_][A-Za-z_0-9]*)*)`)

// The Functions library defines every library file once, in one chunk: a
// name defined by two files would silently be the later one's for every
// script, while under EVALSHA a script that includes only the first would
// get the first. No two files may share a top-level name, and the chunk
// stays under Lua's 200 locals.
func TestLibraryFilesShareNoTopLevelName(t *testing.T) {
	files, err := fs.Glob(lua.FS, "lib/*.lua")
	if err != nil {
		t.Fatal(err)
	}
	owner := map[string]string{"KEYS": "the library chunk", "ARGV": "the library chunk"}
	for _, f := range files {
		b, err := fs.ReadFile(lua.FS, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range topLevelName.FindAllStringSubmatch(string(b), -1) {
			for _, name := range strings.Split(m[1], ",") {
				name = strings.TrimSpace(name)
				if prev, ok := owner[name]; ok && prev != f {
					t.Errorf("%s and %s both define %s at top level", prev, f, name)
				}
				owner[name] = f
			}
		}
	}
	if len(owner) >= 200 {
		t.Errorf("%d top-level locals in the library chunk: Lua allows 200", len(owner))
	}
}
