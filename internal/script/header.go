package script

import (
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/cyclesgo/cycles-go/lua"
)

// A script's header declares its KEYS and ARGV in one machine-readable form,
// one entry a line, numbered from 1 in order, each named:
//
//	-- KEYS: 1 tenant_record   the tenant's record hash
//	--       2 event_stream    the tenant's event stream
//	-- ARGV: 1 tenant_id
//	--       2 event_ctx       event context (internal/eventctx.Arg), which a
//	--                         description may continue on lines without a number
//	--       3.. field_pairs   a variadic tail: the 3rd argument and every later one
//	-- Result: ...
//
// or "-- KEYS: none" / "-- ARGV: none". A block ends at the first line that
// is neither an entry nor a continuation ("--" and at least two spaces), e.g.
// "-- Result:". The binding's `lua` tags (bind.go) must list the same names
// in the same order (CheckHeader).

// Header is what a script's header declares: its KEYS and ARGV names in
// order, a variadic tail's as "<name>..".
type Header struct {
	Keys, Args []string
}

var (
	headerStart = regexp.MustCompile(`^-- (KEYS|ARGV):\s*(.*)$`)
	headerEntry = regexp.MustCompile(`^(\d+)(\.\.)?\s+([a-z][a-z0-9_]*)(\s|$)`)
	headerCont  = regexp.MustCompile(`^--\s{2,}(\S.*)$`)
)

// ParseHeader reads the KEYS and ARGV declarations of a script's source.
func ParseHeader(src string) (Header, error) {
	var h Header
	seen := map[string]bool{}
	lines := strings.Split(src, "\n")
	for i := 0; i < len(lines); i++ {
		m := headerStart.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		what := m[1]
		if seen[what] {
			return h, fmt.Errorf("line %d: a second %s block", i+1, what)
		}
		seen[what] = true
		list := []string{}
		rest := strings.TrimSpace(m[2])
		if rest == "none" {
			if what == "KEYS" {
				h.Keys = list
			} else {
				h.Args = list
			}
			continue
		}
		add := func(line int, text string) (bool, error) {
			e := headerEntry.FindStringSubmatch(text)
			if e == nil {
				return false, nil
			}
			n, _ := strconv.Atoi(e[1])
			if n != len(list)+1 {
				return false, nil // a number inside a description
			}
			if len(list) > 0 && strings.HasSuffix(list[len(list)-1], "..") {
				return false, fmt.Errorf("line %d: %s entry %d follows the variadic tail", line, what, n)
			}
			name := e[3]
			if e[2] != "" {
				name += ".."
			}
			list = append(list, name)
			return true, nil
		}
		ok, err := add(i+1, rest)
		if err != nil {
			return h, err
		}
		if !ok {
			return h, fmt.Errorf("line %d: %s: want \"none\" or \"1 <name> ...\", got %q", i+1, what, rest)
		}
		for i+1 < len(lines) {
			c := headerCont.FindStringSubmatch(lines[i+1])
			if c == nil {
				break
			}
			i++
			if _, err := add(i+1, c[1]); err != nil {
				return h, err
			}
		}
		if what == "KEYS" {
			h.Keys = list
		} else {
			h.Args = list
		}
	}
	for _, what := range []string{"KEYS", "ARGV"} {
		if !seen[what] {
			return h, fmt.Errorf("no \"-- %s:\" line", what)
		}
	}
	return h, nil
}

// HeaderOf parses the header of the embedded script name.
func HeaderOf(name string) (Header, error) {
	src, err := fs.ReadFile(lua.FS, name+".lua")
	if err != nil {
		return Header{}, err
	}
	h, err := ParseHeader(string(src))
	if err != nil {
		return h, fmt.Errorf("lua/%s.lua: %w", name, err)
	}
	return h, nil
}

// Bound reports whether d was declared with its KEYS and ARGV (Bind).
func (d *Def) Bound() bool { return d.bound }

// CheckHeader compares d's binding with its script's header: the same KEYS
// and ARGV names in the same order. A Def without a binding fails.
func (d *Def) CheckHeader() error {
	if !d.bound {
		return fmt.Errorf("%s: no binding (declare it with script.Bind)", d.name)
	}
	h, err := HeaderOf(d.name)
	if err != nil {
		return err
	}
	var errs []string
	for _, c := range []struct {
		what       string
		bind, head []string
	}{{"KEYS", d.keyNames, h.Keys}, {"ARGV", d.argNames, h.Args}} {
		if !slices.Equal(c.bind, c.head) {
			errs = append(errs, fmt.Sprintf("%s: binding %v, header %v", c.what, orNone(c.bind), orNone(c.head)))
		}
	}
	if errs != nil {
		return fmt.Errorf("%s: %s", d.name, strings.Join(errs, "; "))
	}
	return nil
}

func orNone(s []string) any {
	if len(s) == 0 {
		return "none"
	}
	return s
}
