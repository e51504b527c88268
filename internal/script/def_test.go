package script

import (
	"strings"
	"testing"
)

// Define refuses a name without a script, a library, and a second Def of
// the same script.
func TestDefineRefusesWhatIsNotOneScript(t *testing.T) {
	panics := func(name string) (msg string) {
		defer func() { msg, _ = recover().(string) }()
		Define(name)
		return ""
	}
	for name, want := range map[string]string{
		"ledger/nope": "no lua/ledger/nope.lua",
		"lib/core":    "a library",
		"events/find": "", // first definition
	} {
		if got := panics(name); !strings.Contains(got, want) || (want == "") != (got == "") {
			t.Errorf("Define(%q) panic %q, want %q", name, got, want)
		}
	}
	if got := panics("events/find"); !strings.Contains(got, "defined twice") {
		t.Errorf("second Define: panic %q", got)
	}
	if d, ok := Lookup("events/find"); !ok || d.Name() != "events/find" || d.pipelined {
		t.Errorf("Lookup = %v %v", d, ok)
	}
}
