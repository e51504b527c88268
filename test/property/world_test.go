package property

import (
	"fmt"
	"sort"
	"strings"

	"pgregory.net/rapid"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/scope"
)

// policies in key form; "" is "not set" (the tenant default applies).
var policies = []string{"", "REJECT", "ALLOW_IF_AVAILABLE", "ALLOW_WITH_OVERDRAFT"}

// bigScale makes amounts cross 2^53 (Lua doubles would round them) while
// sums stay far below 2^63: an odd multiplier, so no trailing zero bits hide
// a rounding.
const bigScale = int64(1)<<44 + 1

// budgetSpec is one seeded budget of the case.
type budgetSpec struct {
	Scope, Unit      string
	Allocated, Limit int64
}

func (b budgetSpec) id() string { return b.Scope + "|" + b.Unit }

// world is a random budget tree of one tenant: the subjects a case reserves
// against, the budgets at their scopes, and the tenant's defaults.
type world struct {
	tenant   string
	subjects []*cyclesv1.Subject
	derived  []scope.Derived // of each subject
	units    []string        // units that have budgets (plus, rarely, others get used)
	budgets  map[string]budgetSpec
	scale    int64
	// rejectOnly cases send only REJECT (explicit, or unset with a REJECT
	// tenant default): no budget of such a case may ever be oversubscribed.
	rejectOnly    bool
	defaultPolicy string // tenant default_policy ("" = none: ALLOW_IF_AVAILABLE)
	maxExt        *int   // tenant max_extensions (nil = default 10)
}

// levelSetters write one subject level (index 1..5 of scope.Levels).
var levelSetters = []func(*cyclesv1.Subject, string){
	nil,
	func(s *cyclesv1.Subject, v string) { s.Workspace = v },
	func(s *cyclesv1.Subject, v string) { s.App = v },
	func(s *cyclesv1.Subject, v string) { s.Workflow = v },
	func(s *cyclesv1.Subject, v string) { s.Agent = v },
	func(s *cyclesv1.Subject, v string) { s.Toolset = v },
}

// drawWorld draws a tree of depth 1..6: a few root-to-leaf paths over the
// canonical levels (gaps allowed, values from a tiny alphabet so paths share
// prefixes, upper case folding onto lower case), every prefix of every path a
// subject, and budgets at random scopes in one or two units with random
// allocations, overdraft limits and (ignored by the ledger) budget policies.
func drawWorld(t *rapid.T, tenant string) *world {
	w := &world{tenant: tenant, budgets: map[string]budgetSpec{}, scale: 1}
	if chance(t, 20, "big_amounts") {
		w.scale = bigScale
	}
	depth := rapid.IntRange(1, 6).Draw(t, "depth")
	nPaths := rapid.IntRange(1, 4).Draw(t, "paths")
	seen := map[string]bool{}
	add := func(s *cyclesv1.Subject) {
		d, err := scope.Derive(tenant, s)
		if err != nil {
			t.Fatalf("generated an invalid subject %v: %v", s, err)
		}
		key := fmt.Sprintf("%v", scope.SubjectValues(s))
		if seen[key] {
			return
		}
		seen[key] = true
		w.subjects = append(w.subjects, s)
		w.derived = append(w.derived, d)
	}
	for p := 0; p < nPaths; p++ {
		d := depth
		if p > 0 {
			d = rapid.IntRange(1, depth).Draw(t, "path_depth")
		}
		levels := rapid.SliceOfNDistinct(rapid.IntRange(1, 5), d-1, d-1, rapid.ID[int]).Draw(t, "levels")
		sort.Ints(levels)
		values := make([]string, len(levels))
		for i := range levels {
			values[i] = rapid.SampledFrom([]string{"a", "b", "B", "x-1", "y.z_2"}).Draw(t, "value")
		}
		// The path and each of its prefixes is a subject; the root subject
		// names the tenant explicitly or leaves it to the key.
		for cut := 0; cut <= len(levels); cut++ {
			s := &cyclesv1.Subject{}
			if cut == 0 || rapid.Bool().Draw(t, "explicit_tenant") {
				s.Tenant = tenant
			}
			for i := 0; i < cut; i++ {
				levelSetters[levels[i]](s, values[i])
			}
			add(s)
		}
	}
	w.units = rapid.SliceOfNDistinct(rapid.SampledFrom(scope.AllUnits()), 1, 2, rapid.ID[string]).Draw(t, "units")
	var scopes []string
	for _, d := range w.derived {
		for _, s := range d.Affected {
			if !seen["scope:"+s] {
				seen["scope:"+s] = true
				scopes = append(scopes, s)
			}
		}
	}
	sort.Strings(scopes)
	for _, s := range scopes {
		for _, u := range w.units {
			pct := 60
			if !strings.Contains(s, "/") {
				pct = 90 // most trees are funded at the tenant
			}
			if !chance(t, pct, "budgeted") {
				continue
			}
			// Allocations from starved to ample, so both denials and
			// long settle chains happen.
			scale := rapid.SampledFrom([]int64{5_000, 1_000, 0, 100, 50_000}).Draw(t, "allocation_scale")
			b := budgetSpec{Scope: s, Unit: u, Allocated: (scale - rapid.Int64Range(0, scale/2).Draw(t, "allocated_less")) * w.scale}
			if chance(t, 40, "has_overdraft") {
				b.Limit = rapid.Int64Range(1, 3000).Draw(t, "overdraft_limit") * w.scale
			}
			w.budgets[b.id()] = b
		}
	}
	w.rejectOnly = chance(t, 15, "reject_only")
	if w.rejectOnly {
		w.defaultPolicy = "REJECT"
	} else {
		w.defaultPolicy = rapid.SampledFrom(policies).Draw(t, "tenant_default_policy")
	}
	if rapid.Bool().Draw(t, "tenant_max_extensions") {
		n := rapid.IntRange(0, 3).Draw(t, "max_extensions")
		w.maxExt = &n
	}
	return w
}

// drawSubject picks a subject near uniformly.
func (w *world) drawSubject(t *rapid.T) int {
	return pick(t, len(w.subjects), "subject")
}

// budgetsFor lists the budgets a request in unit at subject i holds, in
// canonical order: what the ledger must report as budgeted.
func (w *world) budgetsFor(i int, unit string) []budgetSpec {
	var out []budgetSpec
	for _, s := range w.derived[i].Affected {
		if b, ok := w.budgets[s+"|"+unit]; ok {
			out = append(out, b)
		}
	}
	return out
}

// anyOtherUnit reports whether some affected scope of subject i has a budget
// in a unit other than unit (the UNIT_MISMATCH condition when none is in unit).
func (w *world) anyOtherUnit(i int, unit string) bool {
	for _, s := range w.derived[i].Affected {
		for _, u := range scope.AllUnits() {
			if _, ok := w.budgets[s+"|"+u]; ok && u != unit {
				return true
			}
		}
	}
	return false
}

// resolve is the overage policy the ledger applies: the request's, else the
// tenant default, else ALLOW_IF_AVAILABLE.
func (w *world) resolve(p string) string {
	switch {
	case p != "":
		return p
	case w.defaultPolicy != "":
		return w.defaultPolicy
	default:
		return "ALLOW_IF_AVAILABLE"
	}
}

func (w *world) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "tenant %s default_policy=%q max_ext=%v scale=%d reject_only=%v\n", w.tenant, w.defaultPolicy, derefInt(w.maxExt), w.scale, w.rejectOnly)
	ids := make([]string, 0, len(w.budgets))
	for id := range w.budgets {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		bs := w.budgets[id]
		fmt.Fprintf(&b, "  budget %s allocated=%d overdraft_limit=%d\n", id, bs.Allocated, bs.Limit)
	}
	for i, d := range w.derived {
		fmt.Fprintf(&b, "  subject %d: %s\n", i, d.Path)
	}
	return b.String()
}

func derefInt(p *int) any {
	if p == nil {
		return "default"
	}
	return *p
}
