package script

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"io/fs"
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
	libs, err := resolve(prelude, body)
	if err != nil {
		return "", err
	}
	return libs + body, nil
}

// resolve returns the prelude followed by the libraries body includes.
func resolve(prelude, body string) (string, error) {
	var b strings.Builder
	b.WriteString(prelude)
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
			b.Write(lib)
			b.WriteByte('\n')
		}
		return nil
	}
	if err := add(includes(body)); err != nil {
		return "", err
	}
	return b.String(), nil
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
	fn         string // function (and library) name for FCALL
	lib        string // FUNCTION LOAD source of fn
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
		libs, err := resolve(prelude.String(), body)
		if err != nil {
			return fmt.Errorf("script %s: %w", name, err)
		}
		p := &program{name: name, shebang: shebang, src: libs + body}
		p.plain = redis.NewScript(p.src)
		p.flagged, p.flaggedSrc = p.plain, p.src
		if shebang != "" {
			p.flaggedSrc = shebang + "\n" + p.src
			p.flagged = redis.NewScript(p.flaggedSrc)
		}
		p.fn, p.lib = library(name, libs, body, shebangFlags(shebang))
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
	return ps, nil
}

// library builds the Redis 7 Functions library of one script: the same
// libraries, defined once when the library loads, and the body as the
// registered function, run per FCALL. The body reads KEYS and ARGV, and some
// libraries do too: they are chunk locals the function sets first. So is
// core.lua's per-run state (the last event appended), which must not leak
// from one call into the next. The name carries a digest of the source, so
// two versions of cyclesd sharing a Redis (a rolling deploy) call each
// their own.
func library(name, libs, body string, flags []string) (fn, src string) {
	quoted := make([]string, len(flags))
	for i, f := range flags {
		quoted[i] = "'" + f + "'"
	}
	flagList := strings.Join(quoted, ", ")
	sum := sha1.Sum([]byte(libs + "\x00" + body + "\x00" + flagList))
	fn = "cy_" + strings.NewReplacer("/", "_", "-", "_", ".", "_").Replace(name) + "_" + hex.EncodeToString(sum[:6])
	var b strings.Builder
	b.WriteString("#!lua name=" + fn + "\nlocal KEYS, ARGV\n")
	b.WriteString(libs)
	b.WriteString("\nredis.register_function{function_name = '" + fn + "', flags = {" + flagList + "},\n")
	b.WriteString("callback = function(keys, argv)\nKEYS, ARGV, emitted_stream, emitted_id = keys, argv, nil, nil\n")
	b.WriteString(body)
	b.WriteString("\nend}\n")
	return fn, b.String()
}
