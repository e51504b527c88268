package scope_test

import (
	"strings"
	"testing"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/scope"
	"github.com/cyclesgo/cycles-go/test/property/hashslot"
)

// checkScopeKeys fails t unless every budget key of path (every unit) is in
// the tenant's slot.
func checkScopeKeys(t *testing.T, tenant, path string) {
	t.Helper()
	want := hashslot.Slot(keys.Tenant(tenant).Prefix())
	for _, u := range scope.AllUnits() {
		k := keys.Tenant(tenant).Budget(path, u)
		if got := hashslot.Slot(k); got != want {
			t.Fatalf("budget key %q is in slot %d, tenant %q is in %d", k, got, tenant, want)
		}
	}
}

func validSegments(t *testing.T, path string) {
	t.Helper()
	last := -1
	for i, seg := range strings.Split(path, "/") {
		level, value, ok := strings.Cut(seg, ":")
		idx := -1
		for j, l := range scope.Levels {
			if l == level {
				idx = j
			}
		}
		switch {
		case !ok || idx < 0:
			t.Fatalf("path %q: segment %q is not <level>:<value>", path, seg)
		case i == 0 && idx != 0:
			t.Fatalf("path %q does not start at the tenant", path)
		case idx <= last:
			t.Fatalf("path %q: levels out of canonical order", path)
		case !scope.ValidValue(value) || value != strings.ToLower(value):
			t.Fatalf("path %q: value %q is not a lowercased scope value", path, value)
		}
		last = idx
	}
}

// FuzzDerive: derivation never panics, refuses (never rewrites) a value
// outside [a-zA-Z0-9_.-]{1,128}, and what it accepts is canonical: the tenant
// is the root, affected scopes are the cumulative prefixes ending at the
// path, values are lowercased, and every budget key stays in the tenant's slot.
func FuzzDerive(f *testing.F) {
	f.Add("acme", "Prod", "", "", "summarizer", "")
	f.Add("tenant-a", "", "", "", "", "search")
	f.Add("acme", "a/b", "", "", "", "")
	f.Add("acme", "", "x:y", "", "", "{t:evil}")
	f.Add("acme", "w", "a", "wf", "ag", "ts")
	f.Fuzz(func(t *testing.T, tenant, ws, app, wf, agent, toolset string) {
		subj := &cyclesv1.Subject{Workspace: ws, App: app, Workflow: wf, Agent: agent, Toolset: toolset}
		d, err := scope.Derive(tenant, subj)
		vals := []string{tenant, ws, app, wf, agent, toolset}
		allValid := true
		present := 0
		for _, v := range vals {
			if v != "" {
				present++
				allValid = allValid && scope.ValidValue(v)
			}
		}
		if err != nil {
			if allValid {
				t.Fatalf("Derive refused valid values %q: %v", vals, err)
			}
			return
		}
		if !allValid {
			t.Fatalf("Derive accepted an invalid value in %q: %+v", vals, d)
		}
		if tenant == "" {
			return // no root: auth never yields an empty tenant
		}
		if len(d.Affected) != present || d.Affected[len(d.Affected)-1] != d.Path {
			t.Fatalf("affected %q does not end at path %q with %d levels", d.Affected, d.Path, present)
		}
		if d.Affected[0] != "tenant:"+strings.ToLower(tenant) {
			t.Fatalf("root scope %q, want tenant:%s", d.Affected[0], tenant)
		}
		for i := 1; i < len(d.Affected); i++ {
			if !strings.HasPrefix(d.Affected[i], d.Affected[i-1]+"/") || strings.Count(d.Affected[i], "/") != i {
				t.Fatalf("affected %q are not cumulative prefixes", d.Affected)
			}
		}
		validSegments(t, d.Path)
		if !auth.ValidTenantID(tenant) {
			return
		}
		if c, err := scope.Canonical(tenant, d.Path); err != nil || c != d.Path {
			t.Fatalf("derived path %q is not canonical: %q, %v", d.Path, c, err)
		}
		for _, s := range d.Affected {
			checkScopeKeys(t, tenant, s)
		}
	})
}

// FuzzCanonical: an operator-written scope path is either refused or
// canonicalized to its lowercase form, rooted at the tenant, idempotently,
// with its budget keys in the tenant's slot.
func FuzzCanonical(f *testing.F) {
	f.Add("acme", "tenant:acme/workspace:Prod")
	f.Add("acme", "tenant:acme/agent:bot/workspace:x")
	f.Add("acme", "tenant:other")
	f.Add("acme", "tenant:acme//agent:a")
	f.Add("acme", "tenant:acme/agent:{t:x}")
	f.Add("acme", "tenant:acme/app:a:b")
	f.Add("Acme", "tenant:Acme/agent:B")
	f.Fuzz(func(t *testing.T, tenant, path string) {
		c, err := scope.Canonical(tenant, path)
		if err != nil {
			return
		}
		if c != strings.ToLower(path) {
			t.Fatalf("Canonical(%q) = %q: rewrote more than the case", path, c)
		}
		if !strings.HasPrefix(c+"/", "tenant:"+strings.ToLower(tenant)+"/") {
			t.Fatalf("Canonical(%q) = %q is not rooted at tenant %q", path, c, tenant)
		}
		validSegments(t, c)
		if !auth.ValidTenantID(tenant) {
			return // tenant ids are lowercase; the admin plane validates them first
		}
		if again, err := scope.Canonical(tenant, c); err != nil || again != c {
			t.Fatalf("Canonical is not idempotent on %q: %q, %v", c, again, err)
		}
		checkScopeKeys(t, tenant, c)
	})
}
