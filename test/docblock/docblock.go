// Package docblock keeps generated blocks of the repository's Markdown
// documents in step with the code they describe: a test renders a block
// from the code's one declaration (a layout, a table) and Check compares it
// with the block between
//
//	<!-- generated: NAME (...) -->
//	...
//	<!-- end: NAME -->
//
// in the document, failing when they differ. With CYCLES_UPDATE_DOCS=1 in
// the environment, Check rewrites the block instead (then review the diff
// and commit it).
package docblock

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// UpdateEnv is the environment variable that makes Check rewrite blocks.
const UpdateEnv = "CYCLES_UPDATE_DOCS"

// Root is the repository root: the nearest directory above the working
// directory holding go.mod.
func Root(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = up
	}
}

// Check compares block name of the document at rel (relative to the
// repository root) with want.
func Check(t testing.TB, rel, name, want string) {
	t.Helper()
	path := filepath.Join(Root(t), rel)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	got, start, end, err := Find(doc, name)
	if err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	if got == want {
		return
	}
	if os.Getenv(UpdateEnv) == "1" {
		if err := os.WriteFile(path, []byte(doc[:start]+want+doc[end:]), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: rewrote block %q", rel, name)
		return
	}
	t.Errorf("%s: block %q differs from the code's declaration (rerun with %s=1 to regenerate it)\ngot:\n%s\nwant:\n%s",
		rel, name, UpdateEnv, got, want)
}

// Find returns the text of block name in doc (between its two marker
// lines, each line ending in a newline) and where that text starts and ends.
func Find(doc, name string) (block string, start, end int, err error) {
	open := "<!-- generated: " + name + " "
	i := strings.Index(doc, open)
	if i < 0 {
		return "", 0, 0, fmt.Errorf("no %q marker", strings.TrimSpace(open))
	}
	nl := strings.IndexByte(doc[i:], '\n')
	if nl < 0 {
		return "", 0, 0, fmt.Errorf("marker of %q ends the document", name)
	}
	start = i + nl + 1
	close := "<!-- end: " + name + " -->"
	j := strings.Index(doc[start:], close)
	if j < 0 {
		return "", 0, 0, fmt.Errorf("no %q marker", close)
	}
	end = start + j
	return doc[start:end], start, end, nil
}
