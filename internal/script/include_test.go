package script

import (
	"io/fs"
	"reflect"
	"strings"
	"testing"

	"github.com/cyclesgo/cycles-go/lua"
)

func TestIncludesReadsHeaderDirectivesOnly(t *testing.T) {
	body := "-- ledger/x: does things\n-- include: lib/a.lua lib/b.lua\n--\n-- include: lib/c.lua\nlocal x = 1\n-- include: lib/late.lua\n"
	got := includes(body)
	want := []string{"lib/a.lua", "lib/b.lua", "lib/c.lua"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("includes = %v, want %v", got, want)
	}
	if _, err := compile("", "-- include: lib/missing.lua\nreturn 1"); err == nil {
		t.Fatal("a missing include must fail compilation")
	}
}

// A library's own includes are resolved transitively: each library once,
// after the libraries it needs; a missing one anywhere in the chain fails.
func TestIncludesAreTransitive(t *testing.T) {
	var prelude strings.Builder
	for _, lib := range libraries {
		b, err := fs.ReadFile(lua.FS, lib)
		if err != nil {
			t.Fatal(err)
		}
		prelude.Write(b)
	}
	src, err := compile(prelude.String(), "-- include: lib/ledger_release.lua lib/ledger_util.lua\nreturn 1")
	if err != nil {
		t.Fatal(err)
	}
	at := func(lib string) int {
		i := strings.Index(src, "-- "+lib+":")
		if i < 0 {
			t.Fatalf("%s not included", lib)
		}
		if strings.Count(src, "-- "+lib+":") != 1 {
			t.Fatalf("%s included twice", lib)
		}
		return i
	}
	util, tenant, budget := at("lib/ledger_util.lua"), at("lib/ledger_tenant.lua"), at("lib/ledger_budget.lua")
	res, rel := at("lib/ledger_reservation.lua"), at("lib/ledger_release.lua")
	if !(util < tenant && tenant < res && budget < res && res < rel) {
		t.Fatalf("order util %d tenant %d budget %d reservation %d release %d", util, tenant, budget, res, rel)
	}
	if undef := undefinedCalls(src); len(undef) > 0 {
		t.Fatalf("transitive compile leaves %v undefined", undef)
	}
}
