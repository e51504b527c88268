package script

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/cyclesgo/cycles-go/lua"
)

// libraries are prepended, in this order, to every script body.
var libraries = []string{"lib/int64.lua", "lib/core.lua"}

// includeDirective lines at the top of a script or library name further
// libraries to prepend (after the standard ones, in order), e.g.
// "-- include: lib/ledger_util.lua lib/idem.lua".
const includeDirective = "-- include:"

// includes returns the library paths a script body asks for.
func includes(body string) []string {
	var out []string
	for _, line := range strings.Split(body, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "--") {
			if line == "" {
				continue
			}
			break // directives live in the header comment only
		}
		if rest, ok := strings.CutPrefix(line, includeDirective); ok {
			out = append(out, strings.Fields(rest)...)
		}
	}
	return out
}

// compile builds the source of one script: standard libraries, the script's
// includes with theirs (a library names what it needs with its own
// "-- include:" header, resolved transitively, each library once, every
// library after the ones it includes), then its body.
func compile(prelude, body string) (string, error) {
	order, err := includeOrder(body)
	if err != nil {
		return "", err
	}
	return prelude + libText(order) + body, nil
}

// includeOrder returns the library files body includes, transitively, each
// once and after the files it includes.
func includeOrder(body string) ([]string, error) {
	var order []string
	seen := map[string]bool{}
	var add func(incs []string) error
	add = func(incs []string) error {
		for _, inc := range incs {
			if seen[inc] {
				continue
			}
			seen[inc] = true
			lib, err := fs.ReadFile(lua.FS, inc)
			if err != nil {
				return fmt.Errorf("include %s: %w", inc, err)
			}
			if err := add(includes(string(lib))); err != nil {
				return fmt.Errorf("%s: %w", inc, err)
			}
			order = append(order, inc)
		}
		return nil
	}
	if err := add(includes(body)); err != nil {
		return nil, err
	}
	return order, nil
}

// libText concatenates the library files, in order (includeOrder checked
// that each can be read).
func libText(order []string) string {
	var b strings.Builder
	for _, inc := range order {
		lib, _ := fs.ReadFile(lua.FS, inc)
		b.Write(lib)
		b.WriteByte('\n')
	}
	return b.String()
}

// splitShebang splits a leading "#!lua ..." flag line off a script body.
// It must be the first line of the source Redis sees, so compile cannot
// leave it in the body (the libraries come first).
func splitShebang(body string) (shebang, rest string) {
	if !strings.HasPrefix(body, "#!") {
		return "", body
	}
	line, rest, _ := strings.Cut(body, "\n")
	return strings.TrimSpace(line), rest
}

// shebangFlags returns the flags of a "#!lua flags=a,b" line.
func shebangFlags(shebang string) []string {
	for _, f := range strings.Fields(shebang) {
		if v, ok := strings.CutPrefix(f, "flags="); ok {
			return strings.Split(v, ",")
		}
	}
	return nil
}

// program is one compiled script in every form an Executor may send it:
// the EVAL source (without and with its flag line) and the Redis 7
// Functions library registering it as one function (function.go). All of
// them come from the same Lua text.
type program struct {
	name       string
	shebang    string // "#!lua flags=..." or ""
	src        string // EVAL source: libraries + body, no flag line
	plain      *redis.Script
	flagged    *redis.Script // shebang + src; plain when there is no shebang
	flaggedSrc string
	fn         string     // function name for FCALL
	lib        *fnLibrary // the Functions library registering fn
	body       string     // the script's own text (without libraries)
	libs       []string   // the libraries it includes, in load order
}

// fnLibrary is the one Redis 7 Functions library of a compiled script set:
// every library file defined once, every script registered as a function.
type fnLibrary struct {
	name string // library name (FUNCTION LIST / DELETE)
	src  string // FUNCTION LOAD source
}

// programs is a compiled script set, read-only once built and shared by
// every Executor made from one (Executor.WithClient).
type programs map[string]*program

// compileAll compiles every embedded script plus extra (name -> body, test
// scripts of the Lua libraries).
func compileAll(extra map[string]string) (programs, error) {
	var prelude strings.Builder
	for _, lib := range libraries {
		b, err := fs.ReadFile(lua.FS, lib)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", lib, err)
		}
		prelude.Write(b)
		prelude.WriteByte('\n')
	}
	ps := programs{}
	add := func(name, text string) error {
		shebang, body := splitShebang(text)
		order, err := includeOrder(body)
		if err != nil {
			return fmt.Errorf("script %s: %w", name, err)
		}
		libs := prelude.String() + libText(order)
		p := &program{name: name, shebang: shebang, src: libs + body, body: body, libs: order}
		p.plain = redis.NewScript(p.src)
		p.flagged, p.flaggedSrc = p.plain, p.src
		if shebang != "" {
			p.flaggedSrc = shebang + "\n" + p.src
			p.flagged = redis.NewScript(p.flaggedSrc)
		}
		ps[name] = p
		return nil
	}
	err := fs.WalkDir(lua.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !strings.HasSuffix(path, ".lua") || strings.HasPrefix(path, "lib/") {
			return nil
		}
		body, err := fs.ReadFile(lua.FS, path)
		if err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
		return add(strings.TrimSuffix(path, ".lua"), string(body))
	})
	if err != nil {
		return nil, err
	}
	for name, body := range extra {
		if err := add(name, body); err != nil {
			return nil, err
		}
	}
	ps.link(prelude.String())
	return ps, nil
}

// link builds the one Redis 7 Functions library of the set: the prelude
// and every included library file defined once, when the library loads,
// then each script's body registered as its own function, run per FCALL.
// One library instead of one per script: the libraries' text and their
// compiled closures are held by Redis once, not once per script (issue 24
// measured 1.48 MB of used_memory_functions for 48 per-script libraries).
//
// A body reads KEYS and ARGV, and some libraries do too: they are chunk
// locals each function sets first. So is core.lua's per-run state (the
// last event appended), which must not leak from one call into the next.
// Library files are loaded in one order that puts every file after the
// files it includes; no two define the same top-level name (a test checks
// it), so a script sees the same helpers it sees under EVALSHA.
//
// The library and function names carry a digest of the whole source, so two
// versions of cyclesd sharing a Redis (a rolling deploy) call each their
// own.
func (ps programs) link(prelude string) {
	names := slices.Sorted(maps.Keys(ps))
	var order []string
	seen := map[string]bool{}
	for _, name := range names {
		for _, lib := range ps[name].libs {
			if !seen[lib] {
				seen[lib] = true
				order = append(order, lib)
			}
		}
	}
	defs := prelude + libText(order)
	h := sha1.New()
	h.Write([]byte(defs))
	for _, name := range names {
		p := ps[name]
		fmt.Fprintf(h, "\x00%s\x00%s\x00%s", name, p.shebang, p.body)
	}
	lib := &fnLibrary{name: libraryPrefix + hex.EncodeToString(h.Sum(nil)[:6])}
	var b strings.Builder
	b.WriteString("#!lua name=" + lib.name + "\nlocal KEYS, ARGV\n")
	b.WriteString(defs)
	for _, name := range names {
		p := ps[name]
		p.fn, p.lib = functionName(lib.name, name), lib
		quoted := make([]string, 0, 2)
		for _, f := range shebangFlags(p.shebang) {
			quoted = append(quoted, "'"+f+"'")
		}
		b.WriteString("\nredis.register_function{function_name = '" + p.fn + "', flags = {" + strings.Join(quoted, ", ") + "},\n")
		b.WriteString("callback = function(keys, argv)\nKEYS, ARGV, emitted_stream, emitted_id = keys, argv, nil, nil\n")
		b.WriteString(p.body)
		b.WriteString("\nend}\n")
	}
	lib.src = b.String()
}

// functionName is the FCALL name of script name in library lib.
func functionName(lib, name string) string {
	return lib + "_" + strings.NewReplacer("/", "_", "-", "_", ".", "_").Replace(name)
}
