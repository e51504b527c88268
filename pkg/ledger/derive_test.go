package ledger

import (
	"slices"
	"testing"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
)

func TestIsPrefixChain(t *testing.T) {
	path := "tenant:a/workspace:w/agent:x"
	for _, aff := range [][]string{
		scopePrefixes(path), {"tenant:a", "tenant:a/workspace:w"}, {"tenant:a", "tenant:a/agent:x", path},
		{"tenant:a", "tenant:a/workspace:w", path, path}, {}, {""}, {"tenant:a"},
	} {
		for _, p := range []string{path, "", "tenant:a"} {
			if got, want := isPrefixChain(aff, p), slices.Equal(aff, scopePrefixes(p)); got != want {
				t.Errorf("isPrefixChain(%q, %q) = %v, want %v", aff, p, got, want)
			}
		}
	}
}

func BenchmarkDerive(b *testing.B) {
	subj := &cyclesv1.Subject{Tenant: "acme", Workspace: "prod", App: "chat", Agent: "planner"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := derive("acme", subj, cyclesv1.Unit_UNIT_TOKENS); err != nil {
			b.Fatal(err)
		}
	}
}
