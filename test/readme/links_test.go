package readme

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// mdLink matches a Markdown link target: [text](target).
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// codeSpan matches fenced code blocks and inline code, where a "](x)" is
// code (a Go generic call, say), not a link.
var codeSpan = regexp.MustCompile("(?s)```.*?```|`[^`\n]*`")

// links returns the link targets of md outside its code.
func links(md string) []string {
	var out []string
	for _, m := range mdLink.FindAllStringSubmatch(codeSpan.ReplaceAllString(md, "``"), -1) {
		out = append(out, m[1])
	}
	return out
}

func TestLinksSkipCode(t *testing.T) {
	tests := []struct {
		md   string
		want []string
	}{
		{"see [the design](docs/design.md#x)", []string{"docs/design.md#x"}},
		{"a [`Def`](internal/script/def.go) link with code text", []string{"internal/script/def.go"}},
		{"inline `script.Bind[K, A](\"ledger/reserve\")` code", nil},
		{"```go\nf := g[int](\"x\")\n```\nthen [b](b.md)", []string{"b.md"}},
	}
	for _, tc := range tests {
		if got := links(tc.md); strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("links(%q) = %q, want %q", tc.md, got, tc.want)
		}
	}
}

// The repository stands alone: every relative link of README.md and docs/
// names a file inside it that exists (anchors aside), never a path above it.
func TestLinksStayInRepo(t *testing.T) {
	files := []string{"README.md"}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		rel, _ := filepath.Rel(root, d)
		files = append(files, rel)
	}
	absRoot, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		md, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, link := range links(string(md)) {
			target := link
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			target, anchor, _ := strings.Cut(target, "#")
			if target == "" {
				target = filepath.Base(f)
			}
			abs, err := filepath.Abs(filepath.Join(root, filepath.Dir(f), target))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(abs, absRoot+string(filepath.Separator)) {
				t.Errorf("%s links outside the repository: %s", f, link)
				continue
			}
			if _, err := os.Stat(abs); err != nil {
				t.Errorf("%s links to a missing file: %s", f, link)
				continue
			}
			if anchor != "" && strings.HasSuffix(abs, ".md") {
				doc, err := os.ReadFile(abs)
				if err != nil {
					t.Fatal(err)
				}
				if !headingAnchors(string(doc))[anchor] {
					t.Errorf("%s links to a missing heading: %s", f, link)
				}
			}
		}
		if strings.Contains(string(md), "shared/PROTOCOL.md") {
			t.Errorf("%s refers to a document outside the repository (shared/PROTOCOL.md)", f)
		}
	}
}

// headingAnchors are the anchors GitHub gives a document's headings:
// lowercase, punctuation dropped, spaces as hyphens.
func headingAnchors(md string) map[string]bool {
	anchors := map[string]bool{}
	inCode := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
		}
		if inCode || !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		var b strings.Builder
		for _, r := range title {
			switch {
			case r == ' ' || r == '-':
				b.WriteRune('-')
			case r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		anchors[b.String()] = true
	}
	return anchors
}
