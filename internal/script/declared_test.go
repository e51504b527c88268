package script

import (
	"reflect"
	"testing"

	"github.com/cyclesgo/cycles-go/test/errtest"
)

func TestParseDeclared(t *testing.T) {
	cases := []struct {
		name, src string
		want      map[string][]string
		err       bool
	}{
		{"one line", "-- REPLY a/b: x !y *z\nlocal q = 1\n", map[string][]string{"a/b": {"x", "!y", "*z"}}, false},
		{"continued", "-- REPLY a: x\n--   y z\n-- not a continuation\n--   w\n",
			map[string][]string{"a": {"x", "y", "z"}}, false},
		{"two, other tags ignored", "-- REPLY a: x\n-- RECORD r: f\n-- REPLY b: y\n",
			map[string][]string{"a": {"x"}, "b": {"y"}}, false},
		{"next declaration ends a block", "-- REPLY a: x\n-- REPLY b: y\n",
			map[string][]string{"a": {"x"}, "b": {"y"}}, false},
		{"twice", "-- REPLY a: x\n-- REPLY a: y\n", nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseDeclared(tc.src, "REPLY")
			if (err != nil) != tc.err {
				t.Fatalf("err = %v, want error %v", err, tc.err)
			}
			if !tc.err && !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// A reply layout reads its fields by their Go types, stops at an absent
// trailing field, refuses extra or malformed elements, and refuses at
// declaration a struct it cannot read.
func TestReplyLayout(t *testing.T) {
	type amount int64
	type reply struct {
		Replay bool     `flat:"replay,extra"`
		Name   string   `flat:"name"`
		N      amount   `flat:"n"`
		Opt    *amount  `flat:"opt"`
		List   []string `flat:"list"`
		Tail   string   `flat:"tail,trailing"`
	}
	l := ReplyOf[reply]("t/x")
	head := []any{"OK", "f1", "", ""}
	r := func(v ...any) []any { return append(append([]any{}, head...), v...) }
	cases := []struct {
		name  string
		reply []any
		want  *reply
	}{
		{"full", r(int64(1), "a", "7", "", int64(2), "p", "q", "t"),
			&reply{Replay: true, Name: "a", N: 7, List: []string{"p", "q"}, Tail: "t"}},
		{"no trailing", r(int64(0), "a", int64(7), "8", int64(0)),
			&reply{Name: "a", N: 7, Opt: new(amount(8))}},
		{"short", r(int64(0), "a"), nil},
		{"long", r(int64(0), "a", "7", "", int64(0), "t", "x"), nil},
		{"bad amount", r(int64(0), "a", "7x", "", int64(0)), nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := l.Read(tc.reply)
			if tc.want == nil {
				if err == nil {
					t.Fatalf("read %+v, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	var kinds []string
	for _, f := range l.Fields() {
		kinds = append(kinds, f.Kind)
	}
	if want := []string{"flag", "string", "amount", "optional amount", "list", "string"}; !reflect.DeepEqual(kinds, want) {
		t.Errorf("kinds %v, want %v", kinds, want)
	}
	for _, bad := range []func(){
		func() { ReplyOf[struct{ A string }]("t/untagged") },
		func() {
			ReplyOf[struct {
				A string `flat:"a,trailing"`
				B string `flat:"b"`
			}]("t/after-trailing")
		},
		func() {
			ReplyOf[struct {
				A float64 `flat:"a"`
			}]("t/float")
		},
		func() {
			ReplyOf[struct {
				A string `flat:"a,sometimes"`
			}]("t/option")
		},
	} {
		errtest.Panics(t, "ReplyOf accepted an invalid layout struct", bad)
	}
}
