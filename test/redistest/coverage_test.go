package redistest

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/cyclesgo/cycles-go/test/docblock"
)

// testMainCall is what a package's TestMain must contain for Main's
// leftover, server and goroutine checks to cover its tests: a call of
// redistest.Main, or of pgtest.Main, which runs redistest.Main with the
// shared PostgreSQL's stop as its setup.
var testMainCall = regexp.MustCompile(`(?s)func TestMain\(m \*testing\.M\) \{.*?\b((redistest\.)?Main\(m,|(pgtest\.)?Main\(m\))`)

// Every package with tests runs them under Main: a package without it can
// leave temp dirs and redis-servers behind unseen (cycleshttp once left
// cycles-redistest-* and cycles-cluster-* dirs on every make test).
func TestEveryTestPackageRunsUnderMain(t *testing.T) {
	root := docblock.Root(t)
	withTests := map[string]bool{}
	covered := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch name := d.Name(); {
			case path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules"):
				return filepath.SkipDir
			case path == filepath.Join(root, "gen"):
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		dir, _ := filepath.Rel(root, filepath.Dir(path))
		withTests[dir] = true
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if testMainCall.Match(src) {
			covered[dir] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(withTests) < 10 {
		t.Fatalf("found only %d test packages under %s: the walk is broken", len(withTests), root)
	}
	var missing []string
	for dir := range withTests {
		if !covered[dir] {
			missing = append(missing, dir)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("packages whose tests do not run under redistest.Main (add a TestMain calling redistest.Main): %v", missing)
	}
}
