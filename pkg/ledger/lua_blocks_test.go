package ledger_test

import (
	"io/fs"
	"regexp"
	"strings"
	"testing"

	"github.com/cyclesgo/cycles-go/lua"
)

// The executor prepends only lib/int64.lua and lib/core.lua, so helpers
// shared by several ledger scripts are copied into each of them between
// "-- <shared:NAME>" and "-- </shared:NAME>" markers. This test keeps every
// copy of a block byte-identical, so a fix made in one script cannot silently
// miss the others.
func TestSharedLuaBlocksAreIdentical(t *testing.T) {
	re := regexp.MustCompile(`(?s)-- <shared:(\w+)>\n.*?-- </shared:(\w+)>\n`)
	seen := map[string]string{}
	where := map[string]string{}
	files, err := fs.Glob(lua.FS, "ledger/*.lua")
	if err != nil || len(files) < 10 {
		t.Fatalf("ledger scripts: %v %v", files, err)
	}
	for _, f := range files {
		b, err := fs.ReadFile(lua.FS, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			if m[1] != m[2] {
				t.Fatalf("%s: block %s closed as %s", f, m[1], m[2])
			}
			if prev, ok := seen[m[1]]; ok && prev != m[0] {
				t.Errorf("shared block %q differs between %s and %s", m[1], where[m[1]], f)
			}
			seen[m[1]], where[m[1]] = m[0], f
		}
		if strings.Contains(string(b), "-- @include") {
			t.Errorf("%s: unexpanded include", f)
		}
	}
}

// Every script documents its KEYS, ARGV and result in its header, and never
// uses tonumber on a money field (amounts are int64.lua strings).
func TestLedgerScriptHeaders(t *testing.T) {
	files, _ := fs.Glob(lua.FS, "ledger/*.lua")
	money := regexp.MustCompile(`tonumber\([^)]*(estimate|amount|remaining|reserved|spent|debt|allocated|charged|\.E|\bA\b)`)
	for _, f := range files {
		b, _ := fs.ReadFile(lua.FS, f)
		head := string(b)
		if i := strings.Index(head, "\n\n"); i > 0 {
			head = head[:i]
		}
		for _, want := range []string{"KEYS:", "ARGV:", "Result:"} {
			if !strings.Contains(string(b[:min(len(b), 3000)]), want) {
				t.Errorf("%s: header lacks %q", f, want)
			}
		}
		if m := money.FindString(string(b)); m != "" {
			t.Errorf("%s: tonumber on an amount: %s", f, m)
		}
	}
}
