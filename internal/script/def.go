package script

import (
	"fmt"
	"io/fs"
	"reflect"
	"sort"
	"strings"
	"sync"

	"github.com/cyclesgo/cycles-go/lua"
)

// Def is the Go side of one embedded script, lua/<name>.lua: the value a
// domain package passes to Run instead of a name. Adding a script means adding
// its .lua file and one Define next to the code that calls it; a script
// without a Def, or a Def without a script, fails a test (internal/app) and a Def
// without a script fails at start.
type Def struct {
	name string
	// pipelined: concurrent calls may share a pipeline (pipeline.go).
	pipelined bool
	span      string
	// keyNames and argNames are the binding's KEYS and ARGV names in
	// order, a variadic tail's as "<name>.." (bind.go); nil without a
	// binding (Define alone).
	keyNames, argNames []string
	bound              bool
	// reply is the declared type of a JSON reply and replyShape its
	// member paths (Returns, jsonreply.go); nil when none is declared.
	reply      reflect.Type
	replyShape []string
}

// Name is the script's path under lua/ without ".lua", e.g. "ledger/reserve".
func (d *Def) Name() string { return d.name }

func (d *Def) String() string { return d.name }

// Pipelined marks a per-request script whose work is small and bounded, so
// concurrent calls of it may share one pipeline. Leave it off for anything
// long or unbounded (sweeper batches of up to thousands of expirations,
// listings, event reads, tenant-close batches, admin writes): a long script
// in a pipeline delays every reply behind it, and a read timeout on a
// pipeline makes go-redis (MaxRetries) resend all of it.
func Pipelined(d *Def) { d.pipelined = true }

var (
	defsMu sync.Mutex
	defs   = map[string]*Def{}
)

// Define declares the embedded script name (lua/<name>.lua), once per
// process. Domain packages declare scripts with Bind (bind.go), which calls
// it and adds the script's typed KEYS and ARGV; a Def from Define alone has
// no binding and fails internal/app TestEveryScriptIsBoundToItsHeader. It
// panics when there is no such script or it is defined twice: a
// programming error that no test run can miss.
func Define(name string, opts ...func(*Def)) *Def {
	if strings.HasPrefix(name, "lib/") {
		panic(fmt.Sprintf("script.Define(%q): a library, not a script", name))
	}
	if _, err := fs.Stat(lua.FS, name+".lua"); err != nil {
		panic(fmt.Sprintf("script.Define(%q): no lua/%s.lua", name, name))
	}
	d := &Def{name: name, span: "redis.script " + name}
	for _, o := range opts {
		o(d)
	}
	defsMu.Lock()
	defer defsMu.Unlock()
	if _, dup := defs[name]; dup {
		panic(fmt.Sprintf("script.Define(%q): defined twice", name))
	}
	defs[name] = d
	return d
}

// Defs returns every script defined so far (by the packages linked into the
// program), sorted by name.
func Defs() []*Def {
	defsMu.Lock()
	defer defsMu.Unlock()
	out := make([]*Def, 0, len(defs))
	for _, d := range defs {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// Lookup returns the Def of script name, for tests that check scripts by
// name (a call goes through its typed binding, Bind).
func Lookup(name string) (*Def, bool) {
	defsMu.Lock()
	defer defsMu.Unlock()
	d, ok := defs[name]
	return d, ok
}

// spanName is the name of the trace span of a call ("redis.script <name>").
func (d *Def) spanName() string {
	if d.span == "" { // a Def made in a test
		return "redis.script " + d.name
	}
	return d.span
}

// IsPipelined reports whether concurrent calls may share a pipeline.
func (d *Def) IsPipelined() bool { return d.pipelined }
