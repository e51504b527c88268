package app

import (
	"strings"
	"testing"

	"github.com/cyclesgo/cycles-go/internal/script"
)

// jsonReplyPlanes are the script directories whose JSON replies must be
// declared (script.Returns in Go, "-- JSON" in Lua). Other planes may
// declare theirs the same way; TestEveryScriptIsBoundToItsHeader checks
// every declaration that exists.
var jsonReplyPlanes = []string{"admin/", "ops/", "policy/"}

// notYetDeclared are scripts in those planes bound by packages another
// change owns (the sweeper's control script).
var notYetDeclared = map[string]bool{"ops/sweeper_control": true}

// Every admin, ops and policy script declares its JSON reply in Go and in
// Lua, and the two agree (CheckReply runs for all in
// TestEveryScriptIsBoundToItsHeader).
func TestPlaneRepliesAreDeclared(t *testing.T) {
	n := 0
	for _, d := range script.Defs() {
		name := d.Name()
		if notYetDeclared[name] || !hasAnyPrefix(name, jsonReplyPlanes) {
			continue
		}
		n++
		if d.ReplyType() == nil {
			t.Errorf("%s: no declared JSON reply (script.Returns and -- JSON)", name)
		}
	}
	if n == 0 {
		t.Fatal("no admin, ops or policy script is linked into this test")
	}
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
