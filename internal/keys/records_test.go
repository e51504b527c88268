package keys_test

import (
	"reflect"
	"testing"

	"github.com/cyclesgo/cycles-go/internal/keys"
)

func TestBudgetedScopes(t *testing.T) {
	const path = "tenant:acme/workspace:prod/agent:bot"
	for _, tc := range []struct {
		stored, path string
		want         []string
		bad          bool
	}{
		{"123", path, []string{"tenant:acme", "tenant:acme/workspace:prod", path}, false},
		{"13", path, []string{"tenant:acme", path}, false},
		{"2", path, []string{"tenant:acme/workspace:prod"}, false},
		{`["tenant:acme","tenant:acme\/workspace:prod"]`, path, []string{"tenant:acme", "tenant:acme/workspace:prod"}, false},
		{`["tenant:other"]`, "", []string{"tenant:other"}, false}, // a requeue's list, whatever the path
		{"", path, nil, false},
		{"{}", path, nil, false},
		{"4", path, nil, true},    // deeper than the path
		{"0", path, nil, true},    // positions are 1-based
		{"1a", path, nil, true},   // not a position
		{"1", "", nil, true},      // positions need the path
		{`["x"`, path, nil, true}, // malformed JSON
	} {
		got, err := keys.BudgetedScopes(tc.stored, tc.path)
		if (err != nil) != tc.bad || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("BudgetedScopes(%q, %q) = %q, %v; want %q (error %v)", tc.stored, tc.path, got, err, tc.want, tc.bad)
		}
	}
}

func TestImpliedSubject(t *testing.T) {
	for path, want := range map[string]string{
		"tenant:acme":                          `{"tenant":"acme"}`,
		"tenant:acme/workspace:prod/agent:bot": `{"tenant":"acme","workspace":"prod","agent":"bot"}`,
	} {
		if got := keys.ImpliedSubject(path); got != want {
			t.Errorf("ImpliedSubject(%q) = %s, want %s", path, got, want)
		}
	}
}
