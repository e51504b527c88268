package keys_test

import (
	"io/fs"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/script"
	"github.com/cyclesgo/cycles-go/lua"
	"github.com/cyclesgo/cycles-go/test/docblock"
)

func layoutNames() []string {
	var out []string
	for _, f := range keys.ReservationLayout {
		out = append(out, f.Name)
	}
	return out
}

// The Lua side follows ReservationLayout: lib/record_layout.lua declares
// the same fields in the same order, and the reads' RECORD_FIELDS
// (lib/ledger_record.lua) are "id" and then the layout's read fields in
// its order.
func TestReservationLayoutMatchesLua(t *testing.T) {
	declared, err := script.ParseDeclaredFile("lib/record_layout.lua", "RECORD")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := declared["reservation"], layoutNames(); !slices.Equal(got, want) {
		t.Errorf("lib/record_layout.lua declares the reservation record as\n\t%s\ninternal/keys ReservationLayout is\n\t%s",
			strings.Join(got, " "), strings.Join(want, " "))
	}

	src, err := fs.ReadFile(lua.FS, "lib/ledger_record.lua")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)local RECORD_FIELDS = \{(.*?)\}`).FindStringSubmatch(string(src))
	if m == nil {
		t.Fatal("lib/ledger_record.lua: no RECORD_FIELDS table")
	}
	var got []string
	for _, q := range regexp.MustCompile(`'([^']*)'`).FindAllStringSubmatch(m[1], -1) {
		got = append(got, q[1])
	}
	if want := append([]string{"id"}, keys.ReservationReadFields(true)...); !slices.Equal(got, want) {
		t.Errorf("lib/ledger_record.lua RECORD_FIELDS are\n\t%v\nwant \"id\" and the layout's read fields\n\t%v", got, want)
	}
}

func TestIsReservationField(t *testing.T) {
	for _, c := range []struct {
		name string
		want bool
	}{
		{"state", true}, {"quarantine_resolution", true}, {"rb1", true}, {"cb12", true}, {"lb9", true},
		{"rb", false}, {"rb0", false}, {"rb01", false}, {"rbx", false}, {"xb1", false}, {"id", false},
		{"rb<i>", false}, {"", false}, {"State", false},
	} {
		if got := keys.IsReservationField(c.name); got != c.want {
			t.Errorf("IsReservationField(%q) = %v, want %v", c.name, got, c.want)
		}
	}
	seen := map[string]bool{}
	for _, f := range keys.ReservationLayout {
		if seen[f.Name] {
			t.Errorf("%s listed twice", f.Name)
		}
		seen[f.Name] = true
		if f.Set == "" || f.Holds == "" {
			t.Errorf("%s: says neither who writes it nor what it holds", f.Name)
		}
	}
}

// recordTable renders ReservationLayout as docs/design.md shows it.
func recordTable() string {
	var b strings.Builder
	b.WriteString("| Field | Written by | Holds | Reads |\n|---|---|---|---|\n")
	for _, f := range keys.ReservationLayout {
		read := map[keys.ReadMode]string{keys.NotRead: "no", keys.Read: "yes", keys.ReadOnRequest: "on request"}[f.Read]
		b.WriteString("| `" + f.Name + "` | " + f.Set + " | " + f.Holds + " | " + read + " |\n")
	}
	return b.String()
}

// docs/design.md's reservation record table is ReservationLayout, rendered.
func TestDesignDocRecordTable(t *testing.T) {
	docblock.Check(t, "docs/design.md", "reservation-record", recordTable())
}
