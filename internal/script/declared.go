package script

import (
	"fmt"
	"io/fs"
	"regexp"
	"strings"

	"github.com/cyclesgo/cycles-go/lua"
)

// A Lua library declares the layouts it writes (flat replies, record
// fields) in its comments, in one machine-readable form that tests compare
// with the Go declaration each layout has (ReplyOf; internal/keys for
// records):
//
//	-- REPLY ledger/release: !replay unit released #balances
//	-- RECORD reservation: state unit estimate scope_path
//	--   budgeted created_at ...
//
// A declaration is "-- <TAG> <name>: " followed by whitespace-separated
// tokens, continued on the following lines that start with "--" and at
// least two spaces. What a token's marker characters mean is the
// declaring library's business (it says so next to the declarations).

var declStart = regexp.MustCompile(`^-- ([A-Z]+) ([a-z][a-z0-9_/]*):\s*(.*)$`)

// ParseDeclared returns the tokens of every declaration tagged tag in src,
// by name. A name declared twice is an error.
func ParseDeclared(src, tag string) (map[string][]string, error) {
	out := map[string][]string{}
	lines := strings.Split(src, "\n")
	for i := 0; i < len(lines); i++ {
		m := declStart.FindStringSubmatch(lines[i])
		if len(m) < 3 || m[1] != tag {
			continue
		}
		if _, dup := out[m[2]]; dup {
			return nil, fmt.Errorf("line %d: %s %s declared twice", i+1, tag, m[2])
		}
		tokens := strings.Fields(m[3])
		for i+1 < len(lines) {
			c := headerCont.FindStringSubmatch(lines[i+1])
			if c == nil || declStart.MatchString(lines[i+1]) {
				break
			}
			i++
			tokens = append(tokens, strings.Fields(c[1])...)
		}
		out[m[2]] = tokens
	}
	return out, nil
}

// ParseDeclaredFile is ParseDeclared on the embedded Lua file path (e.g.
// "lib/record_layout.lua"), its errors naming the file.
func ParseDeclaredFile(path, tag string) (map[string][]string, error) {
	src, err := fs.ReadFile(lua.FS, path)
	if err != nil {
		return nil, err
	}
	out, err := ParseDeclared(string(src), tag)
	if err != nil {
		return nil, fmt.Errorf("lua/%s: %w", path, err)
	}
	return out, nil
}
