package script

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

// A "-- JSON" declaration reads into the member paths the Go side lists;
// malformed ones are refused.
func TestParseShape(t *testing.T) {
	cases := []struct {
		src  string
		want []string // nil: an error
	}{
		{"b a", []string{"a", "b"}},
		{"value", []string{""}},
		{"{*}", []string{"*"}},
		{"rows[]{id n} next{member score} done", []string{"done", "next.member", "next.score", "rows[].id", "rows[].n"}},
		{"resp{row{holds[]{scope}} outcome}", []string{"resp.outcome", "resp.row.holds[].scope"}},
		{"[]{a b}", []string{"[].a", "[].b"}},
		{"a a", nil},
		{"a{b", nil},
		{"a}", nil},
		{"{a}", nil},
		{"rows[] done", nil},
		{"Upper", nil},
	}
	for _, tc := range cases {
		got, err := parseShape(strings.Fields(tc.src))
		if tc.want == nil {
			if err == nil {
				t.Errorf("%q: got %v, want an error", tc.src, got)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%q: got %v, %v; want %v", tc.src, got, err, tc.want)
		}
	}
}

// A Go reply type lists its json members as encoding/json reads them:
// tags, embedded structs promoted, nested objects and arrays of objects,
// maps and custom decoders as one member.
func TestShapeOf(t *testing.T) {
	type row struct {
		ID   string `json:"id"`
		Skip string `json:"-"`
	}
	type page struct {
		Rows LuaArray[row] `json:"rows"`
		Done bool          `json:"done"`
	}
	type reply struct {
		page
		Next   *struct{ Member string } `json:"next"`
		Counts map[string]int           `json:"counts"`
		Arr    LuaArray[string]         `json:"arr"`
		hidden int
	}
	cases := []struct {
		typ  reflect.Type
		want []string
	}{
		{reflect.TypeFor[reply](), []string{"arr", "counts", "done", "next.Member", "rows[].id"}},
		{reflect.TypeFor[map[string]string](), []string{"*"}},
		{reflect.TypeFor[bool](), []string{""}},
		{reflect.TypeFor[[]row](), []string{"[].id"}},
	}
	for _, tc := range cases {
		got, err := shapeOf(tc.typ)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%v: got %v, %v; want %v", tc.typ, got, err, tc.want)
		}
	}
	_ = reply{}.hidden
}

// CheckReply fails a Go declaration the Lua does not match, one the Lua
// lacks, and a Lua declaration Go lacks.
func TestCheckReply(t *testing.T) {
	def := func(name string, opts ...func(*Def)) *Def {
		d := &Def{name: name}
		for _, o := range opts {
			o(d)
		}
		return d
	}
	type added struct {
		Added int `json:"added"`
	}
	type addedMore struct {
		Added int    `json:"added"`
		Extra string `json:"extra"`
	}
	cases := []struct {
		name string
		d    *Def
		err  string
	}{
		{"agree", def("admin/register_tenant", Returns[added]()), ""},
		{"scalar", def("admin/touch_api_key", Returns[bool]()), ""},
		{"go has more", def("admin/register_tenant", Returns[addedMore]()), "only in Go"},
		{"other shape", def("admin/touch_api_key", Returns[added]()), "only in Lua: [value]"},
		{"lua only", def("admin/register_tenant"), "Go none"},
		{"go only", def("ledger/get", Returns[added]()), "none (-- JSON"},
		{"neither", def("ledger/get"), ""},
		{"named shape", def("policy/update", Returns[added]()), "only in Lua"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.d.CheckReply()
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("err = %v, want one containing %q", err, tc.err)
			}
		})
	}
}

// A declared reply decodes strictly and only into its declared type.
func TestDecodeReply(t *testing.T) {
	type reply struct {
		A string `json:"a"`
	}
	d := &Def{name: "t/x"}
	Returns[reply]()(d)
	var r reply
	if err := d.decodeReply([]byte(`{"a":"x"}`), &r); err != nil || r.A != "x" {
		t.Fatalf("got %+v, %v", r, err)
	}
	if err := d.decodeReply([]byte(`{"a":"x","b":1}`), &r); err == nil || !strings.Contains(err.Error(), `"b"`) {
		t.Fatalf("an undeclared member: err = %v", err)
	}
	var other struct {
		A string `json:"a"`
	}
	if err := d.decodeReply([]byte(`{"a":"x"}`), &other); err == nil || !strings.Contains(err.Error(), "declared") {
		t.Fatalf("another type: err = %v", err)
	}
}
