// Package layers checks the import graph of internal/ against the layering
// docs/design.md draws: wiring over transports over domain packages over the
// one script executor and the store clients, all over leaf packages. An
// import may point sideways (within a layer) or down, never up; only the
// executor and the store clients import the Redis and PostgreSQL drivers.
// Go itself refuses import cycles, so "no cycle" needs no test here.
package layers

import (
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cyclesgo/cycles-go/test/docblock"
)

const module = "github.com/cyclesgo/cycles-go/"

// layer is one level of the graph, highest first: a package may import its
// own layer's packages and those of the layers after it.
type layer struct {
	name string
	// packages are module-relative paths; each also covers the packages
	// below it ("internal/api" covers internal/api/cycleshttp).
	packages []string
}

var layers = []layer{
	{"wiring", []string{"internal/app"}},
	{"transport", []string{"internal/api", "internal/server"}},
	{"domain", []string{
		"internal/actionkind", "internal/admin", "internal/archiver", "internal/audit",
		"internal/bulk", "internal/events", "internal/ledger", "internal/ledgerops",
		"internal/overview", "internal/policy", "internal/ratelimit", "internal/sweeper",
		"internal/usage",
	}},
	// The one script executor (and what it needs to know of a server) and
	// the history archive's PostgreSQL client.
	{"store", []string{"internal/script", "internal/store", "internal/archive"}},
	{"leaf", []string{
		"internal/apierr", "internal/auth", "internal/config", "internal/contract",
		"internal/cursor", "internal/defaults", "internal/enumkey", "internal/eventctx",
		"internal/idempotency", "internal/keys", "internal/permission", "internal/protowire",
		"internal/reqctx", "internal/reservationid", "internal/scope", "internal/scopefilter",
		"internal/telemetry", "internal/tlsconfig", "internal/validate",
	}},
}

// drivers are the imports that talk to a server, and the packages allowed
// to use each: nothing else talks to Redis or PostgreSQL.
var drivers = map[string][]string{
	"github.com/redis/go-redis/": {"internal/script", "internal/store"},
	"github.com/jackc/pgx/":      {"internal/archive"},
}

// covers reports whether prefix names pkg or a package below it.
func covers(prefix, pkg string) bool {
	return pkg == prefix || strings.HasPrefix(pkg, prefix+"/")
}

// rank is pkg's layer index (0 highest), or -1 when no layer names it.
func rank(pkg string) int {
	for i, l := range layers {
		for _, p := range l.packages {
			if covers(p, pkg) {
				return i
			}
		}
	}
	return -1
}

// check returns every rule an import graph (module-relative package →
// its imports, module-relative for the module's own) breaks.
func check(graph map[string][]string) []string {
	var bad []string
	for pkg, imports := range graph {
		from := rank(pkg)
		if from < 0 {
			bad = append(bad, fmt.Sprintf("%s is in no layer: add it to the table in this test (and to docs/design.md's picture if it is a new kind)", pkg))
			continue
		}
		for _, imp := range imports {
			for driver, allowed := range drivers {
				if strings.HasPrefix(imp, driver) && !slices.ContainsFunc(allowed, func(p string) bool { return covers(p, pkg) }) {
					bad = append(bad, fmt.Sprintf("%s imports %s: only %s may talk to that server", pkg, imp, strings.Join(allowed, ", ")))
				}
			}
			if !strings.HasPrefix(imp, "internal/") {
				continue
			}
			to := rank(imp)
			switch {
			case to < 0:
				// reported as its own package
			case to < from:
				bad = append(bad, fmt.Sprintf("%s (%s) imports %s (%s): an upward import", pkg, layers[from].name, imp, layers[to].name))
			// The wiring builds the executor and the store clients; a
			// transport reaches them only through the domain packages.
			case layers[from].name == "transport" && layers[to].name == "store":
				bad = append(bad, fmt.Sprintf("%s imports %s: a transport calls domain packages, not the store", pkg, imp))
			}
		}
	}
	slices.Sort(bad)
	return bad
}

// importGraph reads the imports of every non-test Go file below
// root/internal, module-relative where they are the module's own.
func importGraph(t *testing.T, root string) map[string][]string {
	t.Helper()
	graph := map[string][]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(filepath.Join(root, "internal"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(rel)
		for _, spec := range f.Imports {
			imp, err := strconv.Unquote(spec.Path.Value)
			if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			imp = strings.TrimPrefix(imp, module)
			if !slices.Contains(graph[pkg], imp) {
				graph[pkg] = append(graph[pkg], imp)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return graph
}

func TestImportsPointDown(t *testing.T) {
	graph := importGraph(t, docblock.Root(t))
	if len(graph) < 40 {
		t.Fatalf("read %d packages below internal/: the walk found too few to be the tree", len(graph))
	}
	for _, b := range check(graph) {
		t.Error(b)
	}
}

// The rules fail on the graphs they are meant to refuse.
func TestCheckRefuses(t *testing.T) {
	tests := []struct {
		name  string
		graph map[string][]string
		want  string // a substring of the one complaint
	}{
		{"domain importing a transport", map[string][]string{"internal/ledger": {"internal/api/runtimeapi"}}, "an upward import"},
		{"leaf importing the domain", map[string][]string{"internal/keys": {"internal/ledger"}}, "an upward import"},
		{"domain importing the Redis driver", map[string][]string{"internal/ledger": {"github.com/redis/go-redis/v9"}}, "only internal/script, internal/store"},
		{"transport importing pgx", map[string][]string{"internal/api/usageapi": {"github.com/jackc/pgx/v5"}}, "only internal/archive"},
		{"transport calling the executor", map[string][]string{"internal/api/runtimeapi": {"internal/script"}}, "not the store"},
		{"a package in no layer", map[string][]string{"internal/newthing": {"internal/keys"}}, "is in no layer"},
	}
	for _, tt := range tests {
		got := check(tt.graph)
		if len(got) != 1 || !strings.Contains(got[0], tt.want) {
			t.Errorf("%s: check = %q, want one complaint with %q", tt.name, got, tt.want)
		}
	}
	ok := map[string][]string{
		"internal/app":            {"internal/script", "internal/api/runtimeapi"},
		"internal/api/runtimeapi": {"internal/ledger", "internal/apierr"},
		"internal/ledger":         {"internal/script", "internal/keys", "internal/sweeper"},
		"internal/script":         {"github.com/redis/go-redis/v9", "internal/store/redisinfo"},
	}
	if got := check(ok); len(got) != 0 {
		t.Errorf("a graph that keeps every rule: %q", got)
	}
}
