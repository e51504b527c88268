package script

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"github.com/cyclesgo/cycles-go/test/errtest"
)

type testKeys struct {
	Record string `lua:"tenant_record"`
	Stream string `lua:"event_stream"`
}

type myString string

type tailKeys struct {
	First myString `lua:"first"`
	Rest  []string `lua:"rest"`
}

// The encoders send the fields in declaration order with the kinds a
// positional call sent: strings, int64s, "1"/"0", then the tail's elements.
func TestLayoutEncodes(t *testing.T) {
	kl, err := layoutOf(reflect.TypeFor[testKeys](), true)
	if err != nil {
		t.Fatal(err)
	}
	if got := kl.strings(ptr(&testKeys{"r", "s"})); !reflect.DeepEqual(got, []string{"r", "s"}) {
		t.Errorf("keys = %q", got)
	}
	type args struct {
		ID    string   `lua:"id"`
		N     int64    `lua:"n"`
		M     int      `lua:"m"`
		Apply bool     `lua:"apply"`
		No    bool     `lua:"no"`
		Pairs []string `lua:"pairs"`
	}
	al, err := layoutOf(reflect.TypeFor[args](), false)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := al.names(), []string{"id", "n", "m", "apply", "no", "pairs.."}; !reflect.DeepEqual(got, want) {
		t.Errorf("names = %q, want %q", got, want)
	}
	for _, c := range []struct {
		in   args
		want []any
	}{
		{args{"x", -7, 3, true, false, []string{"a", "b"}}, []any{"x", int64(-7), int64(3), "1", "0", "a", "b"}},
		{args{"", 1 << 62, 0, false, false, nil}, []any{"", int64(1 << 62), int64(0), "0", "0"}},
	} {
		if got := al.values(ptr(&c.in)); !reflect.DeepEqual(got, c.want) {
			t.Errorf("values(%+v) = %#v, want %#v", c.in, got, c.want)
		}
	}
	tl, err := layoutOf(reflect.TypeFor[tailKeys](), true)
	if err != nil {
		t.Fatal(err)
	}
	if got := tl.strings(ptr(&tailKeys{"f", []string{"x", "y"}})); !reflect.DeepEqual(got, []string{"f", "x", "y"}) {
		t.Errorf("tail keys = %q", got)
	}
	type anys struct {
		A    string `lua:"a"`
		Rest []any  `lua:"rest"`
	}
	yl, _ := layoutOf(reflect.TypeFor[anys](), false)
	if got := yl.values(ptr(&anys{"a", []any{"b", int64(2)}})); !reflect.DeepEqual(got, []any{"a", "b", int64(2)}) {
		t.Errorf("[]any tail = %#v", got)
	}
	if got := (&layout{}).values(nil); got != nil {
		t.Errorf("None = %#v", got)
	}
}

func ptr[T any](v *T) unsafe.Pointer { return unsafe.Pointer(v) }

// A binding struct the encoders cannot read is refused at Bind time.
func TestLayoutRefuses(t *testing.T) {
	type noTag struct{ A string }
	type badName struct {
		A string `lua:"Tenant"`
	}
	type intKey struct {
		A int64 `lua:"a"`
	}
	type afterTail struct {
		A []string `lua:"a"`
		B string   `lua:"b"`
	}
	type float struct {
		A float64 `lua:"a"`
	}
	for _, c := range []struct {
		t    reflect.Type
		keys bool
		want string
	}{
		{reflect.TypeFor[noTag](), false, "lua tag"},
		{reflect.TypeFor[badName](), false, "lua tag"},
		{reflect.TypeFor[intKey](), true, "a key must be a string"},
		{reflect.TypeFor[afterTail](), false, "follows the variadic tail"},
		{reflect.TypeFor[float](), false, "unsupported type"},
		{reflect.TypeFor[string](), false, "not a struct"},
	} {
		_, err := layoutOf(c.t, c.keys)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err %v, want %q", c.t, err, c.want)
		}
	}
}

func TestParseHeader(t *testing.T) {
	for _, c := range []struct {
		name, src string
		want      Header
		err       string
	}{
		{"one a line", "-- s: x\n--\n-- KEYS: 1 tenant_record   the record\n--       2 event_stream\n-- ARGV: 1 id  the id, 1..1000\n--         continued 2 words\n--       2 n\n-- Result: ok\nlocal x = 1\n",
			Header{[]string{"tenant_record", "event_stream"}, []string{"id", "n"}}, ""},
		{"none", "-- KEYS: none\n-- ARGV: none\n", Header{[]string{}, []string{}}, ""},
		{"tail", "-- KEYS: 1 a\n-- ARGV: 1 b\n--       2.. pairs  field, value\n", Header{[]string{"a"}, []string{"b", "pairs.."}}, ""},
		{"entry after tail", "-- KEYS: 1 a\n-- ARGV: 1.. b\n--       2 c\n", Header{}, "follows the variadic tail"},
		{"no ARGV", "-- KEYS: 1 a\n", Header{}, `no "-- ARGV:" line`},
		{"old form", "-- KEYS[1] = record\n-- KEYS: 1 tenant record\n-- ARGV: none\n", Header{[]string{"tenant"}, []string{}}, ""},
		{"prose", "-- KEYS: the tenant record\n-- ARGV: none\n", Header{}, `want "none"`},
		{"twice", "-- KEYS: none\n-- KEYS: none\n-- ARGV: none\n", Header{}, "a second KEYS"},
		{"skipped number", "-- KEYS: 1 a\n--       3 c\n-- ARGV: none\n", Header{[]string{"a"}, []string{}}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseHeader(c.src)
			if errtest.Want(t, err, c.err) {
				return
			}
			if err != nil || !reflect.DeepEqual(got, c.want) {
				t.Fatalf("= %+v, %v; want %+v", got, err, c.want)
			}
		})
	}
}

// CheckHeader fails a Def without a binding, and one whose names, count or
// order differ from the header's.
func TestCheckHeader(t *testing.T) {
	h, err := HeaderOf("events/read")
	if err != nil {
		t.Fatal(err)
	}
	swap := append([]string(nil), h.Args...)
	swap[0], swap[1] = swap[1], swap[0]
	for _, c := range []struct {
		name string
		d    *Def
		want string
	}{
		{"match", &Def{name: "events/read", bound: true, keyNames: h.Keys, argNames: h.Args}, ""},
		{"unbound", &Def{name: "events/read"}, "no binding"},
		{"order", &Def{name: "events/read", bound: true, keyNames: h.Keys, argNames: swap}, "ARGV: binding"},
		{"count", &Def{name: "events/read", bound: true, keyNames: append(h.Keys, "extra"), argNames: h.Args}, "KEYS: binding"},
		{"name", &Def{name: "events/read", bound: true, keyNames: []string{"other"}, argNames: h.Args}, "KEYS: binding"},
	} {
		err := c.d.CheckHeader()
		if (c.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

// BenchmarkEncode compares a typed call's encoding of reserve-sized KEYS
// and ARGV with the positional slices it replaces.
func BenchmarkEncode(b *testing.B) {
	type rk struct {
		A string `lua:"a"`
		B string `lua:"b"`
		C string `lua:"c"`
		D string `lua:"d"`
		E string `lua:"e"`
		F string `lua:"f"`
	}
	type ra struct {
		A1  string `lua:"a1"`
		A2  string `lua:"a2"`
		A3  string `lua:"a3"`
		A4  int64  `lua:"a4"`
		A5  string `lua:"a5"`
		A6  string `lua:"a6"`
		A7  int64  `lua:"a7"`
		A8  int64  `lua:"a8"`
		A9  string `lua:"a9"`
		A10 string `lua:"a10"`
		A11 string `lua:"a11"`
		A12 string `lua:"a12"`
		A13 string `lua:"a13"`
		A14 string `lua:"a14"`
		A15 string `lua:"a15"`
		A16 int64  `lua:"a16"`
		A17 string `lua:"a17"`
		A18 string `lua:"a18"`
		A19 string `lua:"a19"`
	}
	kl, _ := layoutOf(reflect.TypeFor[rk](), true)
	al, _ := layoutOf(reflect.TypeFor[ra](), false)
	s := fmt.Sprint("x", b.N)
	n := int64(b.N) + 1000
	b.Run("positional", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			k := []string{s, s, s, s, s, s}
			a := []any{s, s, s, n, s, s, n, n, s, s, s, s, s, s, s, n, s, s, s}
			sink(k, a)
		}
	})
	b.Run("typed", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			k := rk{s, s, s, s, s, s}
			a := ra{s, s, s, n, s, s, n, n, s, s, s, s, s, s, s, n, s, s, s}
			sink(kl.strings(ptr(&k)), al.values(ptr(&a)))
		}
	})
}

// sunk keeps what a call sends, as go-redis does (the slices escape).
var sunk struct {
	k []string
	a []any
}

func sink(k []string, a []any) { sunk.k, sunk.a = k, a }

// Rebind accepts other Go types for a binding's fields only under the same
// names in the same order, and refuses a script without a binding.
func TestRebind(t *testing.T) {
	type k struct {
		Record string `lua:"record"`
	}
	type a struct {
		ID     string `lua:"id"`
		Amount int64  `lua:"amount"`
	}
	type aString struct {
		ID     string `lua:"id"`
		Amount string `lua:"amount"`
	}
	type aSwapped struct {
		Amount string `lua:"amount"`
		ID     string `lua:"id"`
	}
	bound := &Def{name: "t/x", bound: true, keyNames: []string{"record"}, argNames: []string{"id", "amount"}}
	sc, err := Rebind[k, aString](bound)
	if err != nil {
		t.Fatal(err)
	}
	if ks, args := sc.Encode(k{"r"}, aString{"i", "9223372036854775808"}); !reflect.DeepEqual(ks, []string{"r"}) ||
		!reflect.DeepEqual(args, []any{"i", "9223372036854775808"}) {
		t.Fatalf("encoded %v %v", ks, args)
	}
	if _, err := Rebind[k, a](bound); err != nil {
		t.Fatal(err)
	}
	if _, err := Rebind[k, aSwapped](bound); err == nil || !strings.Contains(err.Error(), "rebinding") {
		t.Errorf("swapped ARGV: %v", err)
	}
	if _, err := Rebind[k, a](&Def{name: "t/unbound"}); err == nil {
		t.Error("rebound a script without a binding")
	}
}
