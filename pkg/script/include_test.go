package script

import (
	"reflect"
	"testing"
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
