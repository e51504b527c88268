package script

import (
	"regexp"
	"sort"
	"strings"
	"testing"
)

// Every compiled script calls only helpers defined before the call (in the
// prelude, an included library or the script itself) or Lua's own
// functions. A script whose include list misses a library would otherwise
// fail only when that code path runs in production ("attempt to call a nil
// value"), and a library included after its user resolves to a nil global.
func TestEveryCalledHelperIsDefinedBeforeUse(t *testing.T) {
	e, err := New(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range e.Names() {
		if missing := undefinedCalls(e.sources[name]); len(missing) > 0 {
			t.Errorf("%s calls helpers it does not define before use: %v", name, missing)
		}
	}
}

// The checker itself: an undefined helper, one defined only after its use,
// and calls that are fine (locals, parameters, loop variables, methods,
// library functions, Lua builtins, text in strings and comments).
func TestUndefinedCallsChecker(t *testing.T) {
	src := `
local function a(x, cb) return cb(x) end
local b, c = 1, function(y) return y end
-- missing_in_comment(1)
local s = 'not_a_call(2)' .. "nor(3)"
for i, v in ipairs({}) do a(i, c) end
redis.call('GET', 'k'); string.format('%d', 1); s:upper()
local t = tonumber('1') and pcall(type, 1)
missing(1)
late(2)
local function late() end
`
	got := undefinedCalls(src)
	want := []string{"late", "missing"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("undefinedCalls = %v, want %v", got, want)
	}
}

var (
	luaBuiltins = map[string]bool{
		"assert": true, "error": true, "getmetatable": true, "ipairs": true, "loadstring": true, "next": true,
		"pairs": true, "pcall": true, "print": true, "rawequal": true, "rawget": true, "rawset": true,
		"select": true, "setmetatable": true, "tonumber": true, "tostring": true, "type": true,
		"unpack": true, "xpcall": true,
	}
	luaKeywords = map[string]bool{
		"and": true, "break": true, "do": true, "else": true, "elseif": true, "end": true, "false": true,
		"for": true, "function": true, "if": true, "in": true, "local": true, "nil": true, "not": true,
		"or": true, "repeat": true, "return": true, "then": true, "true": true, "until": true, "while": true,
	}
	reLocalFunc = regexp.MustCompile(`\blocal\s+function\s+([A-Za-z_]\w*)`)
	reLocalVars = regexp.MustCompile(`\blocal\s+([A-Za-z_][\w\s,]*?)\s*(?:=|\n|;|$)`)
	reParams    = regexp.MustCompile(`\bfunction\b\s*[\w.:]*\s*\(([^)]*)\)`)
	reForVars   = regexp.MustCompile(`\bfor\s+([A-Za-z_][\w\s,]*?)\s+(?:in\b|=)`)
	reCall      = regexp.MustCompile(`([A-Za-z_]\w*)\s*\(`)
)

// undefinedCalls lists the names called as functions in src that are not
// Lua builtins and have no definition (local, parameter, loop variable)
// earlier in the source.
func undefinedCalls(src string) []string {
	code := stripStringsAndComments(src)
	defined := map[string]int{} // name -> first definition offset
	def := func(name string, at int) {
		name = strings.TrimSpace(name)
		if name == "" || name == "..." {
			return
		}
		if prev, ok := defined[name]; !ok || at < prev {
			defined[name] = at
		}
	}
	for _, m := range reLocalFunc.FindAllStringSubmatchIndex(code, -1) {
		def(code[m[2]:m[3]], m[0])
	}
	for _, re := range []*regexp.Regexp{reLocalVars, reParams, reForVars} {
		for _, m := range re.FindAllStringSubmatchIndex(code, -1) {
			for _, n := range strings.Split(code[m[2]:m[3]], ",") {
				def(n, m[0])
			}
		}
	}
	missing := map[string]bool{}
	for _, m := range reCall.FindAllStringSubmatchIndex(code, -1) {
		name := code[m[2]:m[3]]
		if luaKeywords[name] || luaBuiltins[name] {
			continue
		}
		if m[2] > 0 {
			if p := code[m[2]-1]; p == '.' || p == ':' {
				continue // a library function or a method
			}
		}
		if before := strings.TrimRight(code[:m[2]], " \t"); strings.HasSuffix(before, "function") {
			continue // a definition, not a call
		}
		if at, ok := defined[name]; !ok || at > m[2] {
			missing[name] = true
		}
	}
	out := make([]string, 0, len(missing))
	for n := range missing {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// stripStringsAndComments blanks Lua string literals and comments (keeping
// offsets), so text inside them is not taken for code.
func stripStringsAndComments(src string) string {
	b := []byte(src)
	for i := 0; i < len(b); i++ {
		switch {
		case b[i] == '-' && i+1 < len(b) && b[i+1] == '-':
			for ; i < len(b) && b[i] != '\n'; i++ {
				b[i] = ' '
			}
		case b[i] == '\'' || b[i] == '"':
			q := b[i]
			for i++; i < len(b) && b[i] != q && b[i] != '\n'; i++ {
				if b[i] == '\\' && i+1 < len(b) {
					b[i] = ' '
					i++
				}
				b[i] = ' '
			}
		}
	}
	return string(b)
}
