package docblock

import "testing"

func TestFind(t *testing.T) {
	doc := "a\n<!-- generated: x (from y) -->\n| t |\n<!-- end: x -->\nb\n"
	cases := []struct {
		name, doc, want string
		err             bool
	}{
		{"x", doc, "| t |\n", false},
		{"z", doc, "", true},
		{"x", "<!-- generated: x (y) -->\nno end\n", "", true},
		{"x", "<!-- generated: x (y) -->", "", true},
	}
	for _, tc := range cases {
		got, start, end, err := Find(tc.doc, tc.name)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("Find(%q, %q) = %q, %v; want %q (err %v)", tc.doc, tc.name, got, err, tc.want, tc.err)
		}
		if err == nil && tc.doc[start:end] != got {
			t.Errorf("Find(%q): offsets %d..%d do not hold the block", tc.name, start, end)
		}
	}
}
