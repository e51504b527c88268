package scripttest

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/cyclesgo/cycles-go/test/docblock"
	"github.com/cyclesgo/cycles-go/test/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m, redistest.MainOptions{LeakCheck: true}) }

// ownMode are the test files that build an executor with script.New because
// they need one mode, not the one cyclesd would pick: relative to the module
// root, and the reason.
var ownMode = map[string]string{
	"internal/app/scripts_test.go":              "no client: only the script names",
	"internal/ledger/ledger_fuzz_test.go":       "no server: captures the EVALSHA the ledger would send",
	"internal/archiver/rediscost_bench_test.go": "measures FCALL with its own call timeout",
}

var scriptNew = regexp.MustCompile(`\bscript\.New\(`)

// Tests get an executor through this package, so every suite runs its
// scripts in the production mode of its backend (issue 24); internal/script's
// own suites and the files of ownMode choose theirs.
func TestOneWayToAnExecutor(t *testing.T) {
	root := docblock.Root(t)
	seen := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel == "internal/script" || rel == "gen" || (path != root && strings.HasPrefix(d.Name(), ".")) || d.Name() == "testdata" || d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		seen++
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if _, ok := ownMode[rel]; !ok && scriptNew.Match(src) {
			t.Errorf("%s calls script.New: use scripttest.On (or Shared, New), or name it in ownMode with the reason", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < 50 {
		t.Fatalf("found only %d test files under %s: the walk is broken", seen, root)
	}
	for rel := range ownMode {
		if _, err := os.Stat(filepath.Join(root, rel)); err != nil {
			t.Errorf("ownMode names %s: %v", rel, err)
		}
	}
}
