package script

import (
	"context"
	"testing"

	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/test/redistest"
)

// pagingProbe runs lib/paging.lua on ARGV: the size ARGV[1] against the
// bound ARGV[2], and the lower bound after the cursor ARGV[3].
const pagingProbe = `-- include: lib/paging.lua
local n, refused = paging.size(ARGV[1], tonumber(ARGV[2]), 'page size')
if not n then return refused end
return ok({n = n, after = paging.after(ARGV[3])})
`

// The read scripts that walk a zset or a stream one page at a time (the
// tenant registry, the archive's streams and queue, a tenant's events, the
// sweeper's expire batch) take their size and cursor through lib/paging.lua:
// a whole size in 1..max or an INVALID_REQUEST naming the range, and an
// exclusive bound after a cursor ('-' for none), on every backend.
func TestPagingArguments(t *testing.T) {
	cases := []struct {
		size, max, cursor string
		n                 int
		after, refusal    string // refusal: the message when refused
	}{
		{size: "1", max: "1000", n: 1, after: "-"},
		{size: "1000", max: "1000", cursor: "acme", n: 1000, after: "(acme"},
		{size: "7", max: "10", cursor: "1700000000000-3", n: 7, after: "(1700000000000-3"},
		{size: "0", max: "1000", refusal: "page size must be 1..1000"},
		{size: "1001", max: "1000", refusal: "page size must be 1..1000"},
		{size: "-1", max: "10000", refusal: "page size must be 1..10000"},
		{size: "2.5", max: "10", refusal: "page size must be 1..10"},
		{size: "", max: "10", refusal: "page size must be 1..10"},
		{size: "ten", max: "10", refusal: "page size must be 1..10"},
	}
	for _, be := range redistest.AllModes(t) {
		t.Run(be.Name, func(t *testing.T) {
			ex := probeExec(t, be.Client, map[string]string{"test/paging": pagingProbe}, modeOf(be)...)
			for _, c := range cases {
				var out struct {
					N     int
					After string
				}
				err := ex.RunInto(context.Background(), &out, def("test/paging"), []string{"k"}, c.size, c.max, c.cursor)
				if c.refusal != "" {
					e, ok := apierr.As(err)
					if !ok || e.Code != apierr.InvalidRequest || e.Message != c.refusal {
						t.Errorf("size %q of 1..%s: %v, want INVALID_REQUEST %q", c.size, c.max, err, c.refusal)
					}
					continue
				}
				if err != nil || out.N != c.n || out.After != c.after {
					t.Errorf("size %q cursor %q: %+v %v, want n %d after %q", c.size, c.cursor, out, err, c.n, c.after)
				}
			}
		})
	}
}
