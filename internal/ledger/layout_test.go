package ledger

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/script"
	"github.com/cyclesgo/cycles-go/test/docblock"
)

// replyLayout is a declared reply layout (script.ReplyLayout of any type).
type replyLayout interface {
	Name() string
	Fields() []script.ReplyField
}

// replyLayouts are the ledger's flat reply layouts, in docs order.
var replyLayouts = []replyLayout{replyReserve, replyDecide, replyCommit, replyRelease, replyExtend, replyEvent}

// kindToken is a field's name with the mark of its kind: * a list, # a
// list of balances.
func kindToken(f script.ReplyField) string {
	switch f.Kind {
	case "list":
		return "*" + f.Name
	case "balanceList":
		return "#" + f.Name
	}
	return f.Name
}

// luaToken is how lua/lib/ledger_snapshot.lua writes a field of a layout.
func luaToken(f script.ReplyField) string {
	tok := kindToken(f)
	if f.Extra {
		tok = "!" + tok
	}
	if f.Trailing {
		tok = "?" + tok
	}
	return tok
}

// The reply layouts lua/lib/ledger_snapshot.lua declares are the Go
// layouts (reply.go): the same scripts, the same fields in the same order,
// each with the same kind and markers. A reply the Lua writes differently
// from its declaration fails the readers (End) in every suite.
func TestReplyLayoutsMatchLua(t *testing.T) {
	declared, err := script.ParseDeclaredFile("lib/ledger_snapshot.lua", "REPLY")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range replyLayouts {
		var want []string
		for _, f := range l.Fields() {
			want = append(want, luaToken(f))
		}
		got, ok := declared[l.Name()]
		if !ok {
			t.Errorf("%s: not declared in lib/ledger_snapshot.lua (want \"-- REPLY %s: %s\")", l.Name(), l.Name(), strings.Join(want, " "))
			continue
		}
		delete(declared, l.Name())
		if !slices.Equal(got, want) {
			t.Errorf("%s: lib/ledger_snapshot.lua declares\n\t%s\nthe Go layout (reply.go) is\n\t%s", l.Name(),
				strings.Join(got, " "), strings.Join(want, " "))
		}
	}
	for name := range declared {
		t.Errorf("lib/ledger_snapshot.lua declares a reply for %s, which has no Go layout", name)
	}
}

// replyTable renders the reply layouts as docs/design.md shows them.
func replyTable() string {
	var b strings.Builder
	b.WriteString("| Script | Extras (the live call only) | Answer (what a replay rebuilds) |\n|---|---|---|\n")
	for _, l := range replyLayouts {
		var extras, answer []string
		for _, f := range l.Fields() {
			s := "`" + f.Name + "`"
			switch f.Kind {
			case "list":
				s += " (list)"
			case "balanceList":
				s += " (packed balances)"
			}
			if f.Trailing {
				s += " (trailing)"
			}
			if f.Extra {
				extras = append(extras, s)
			} else {
				answer = append(answer, s)
			}
		}
		b.WriteString("| `" + l.Name() + "` | " + strings.Join(extras, ", ") + " | " + strings.Join(answer, ", ") + " |\n")
	}
	return b.String()
}

// docs/design.md's reply table is the Go layouts, rendered.
func TestDesignDocReplyTable(t *testing.T) {
	docblock.Check(t, "docs/design.md", "reply-layouts", replyTable())
}

// The reads' record (get.lua and list.lua answer it) has the fields
// keys.ReservationLayout marks as read, in its order, after the id.
func TestRecordStructFollowsLayout(t *testing.T) {
	rt := reflect.TypeFor[record]()
	var got []string
	for i := range rt.NumField() {
		got = append(got, strings.Split(rt.Field(i).Tag.Get("json"), ",")[0])
	}
	if want := append([]string{"id"}, keys.ReservationReadFields(true)...); !slices.Equal(got, want) {
		t.Errorf("record's fields are\n\t%v\nwant \"id\" and keys.ReservationLayout's read fields\n\t%v", got, want)
	}
}
