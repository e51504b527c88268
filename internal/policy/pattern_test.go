package policy

import (
	"testing"

	"github.com/cyclesgo/cycles-go/test/errtest"
)

func TestCompile(t *testing.T) {
	cases := []struct {
		pattern, canonical, lua, err string
	}{
		{pattern: "*", canonical: "*", lua: "."},
		{pattern: "tenant:acme", canonical: "tenant:acme", lua: "^tenant:acme$"},
		{pattern: "tenant:acme/*", canonical: "tenant:acme/*", lua: "^tenant:acme/.+$"},
		{pattern: "tenant:acme/workspace:Eng/*", canonical: "tenant:acme/workspace:eng/*", lua: "^tenant:acme/workspace:eng/.+$"},
		{pattern: "tenant:*/agent:*", canonical: "tenant:*/agent:*", lua: "^tenant:[^/]+/agent:[^/]+$"},
		{pattern: "agent:*", canonical: "agent:*", lua: "/agent:[^/]+$"},
		{pattern: "*/agent:summarizer", canonical: "*/agent:summarizer", lua: "/agent:summarizer$"},
		{pattern: "workspace:a.b-c/agent:x", canonical: "workspace:a.b-c/agent:x", lua: "/workspace:a%.b%-c/agent:x$"},
		{pattern: "tenant:other", err: "can only match tenant:acme"},
		{pattern: "*/tenant:acme", err: "the tenant is the root"},
		{pattern: "agent:x/workspace:y", err: "in the order"},
		{pattern: "tenant:acme/*/agent:x", err: "want <level>:<value>"},
		{pattern: "planet:x", err: "unknown level"},
		{pattern: "*/*", err: "at least one"},
		{pattern: "agent:a%b", err: "value must be"},
		{pattern: "", err: "want <level>"},
	}
	for _, c := range cases {
		t.Run(c.pattern, func(t *testing.T) {
			canon, lua, err := Compile("acme", c.pattern)
			if errtest.Want(t, err, c.err) {
				return
			}
			if err != nil || canon != c.canonical || lua != c.lua {
				t.Fatalf("Compile(%q) = %q, %q, %v; want %q, %q", c.pattern, canon, lua, err, c.canonical, c.lua)
			}
		})
	}
}

func TestTenantOf(t *testing.T) {
	for id, want := range map[string]string{
		"pol_acme_0123456789abcdef0123456789abcdef":  "acme",
		"pol_a_b.c_0123456789abcdef0123456789abcdef": "a_b.c",
		"pol__0123456789abcdef0123456789abcdef":      "",
		"pol_acme_0123":                              "",
		"rsv_acme_0123456789abcdef0123456789abcdef":  "",
		"pol_acme0123456789abcdef0123456789abcdef0":  "",
	} {
		if got := TenantOf(id); got != want {
			t.Errorf("TenantOf(%q) = %q, want %q", id, got, want)
		}
	}
}
