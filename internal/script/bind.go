package script

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"unsafe"
)

// Typed bindings.
//
// A script's KEYS and ARGV are declared once, in Go, as two structs whose
// fields are the script's keys and arguments in order, each named by a `lua`
// tag that is the name the script's header gives it (header.go):
//
//	type releaseKeys struct {
//		Prefix string `lua:"tenant_prefix"`
//		Record string `lua:"tenant_record"`
//	}
//	type releaseArgs struct {
//		ID     string `lua:"reservation_id"`
//		TTL    int64  `lua:"ttl_ms"`
//		Extras []string `lua:"extra_pairs"` // a variadic tail, header "3.. extra_pairs"
//	}
//	var releaseScript = script.Bind[releaseKeys, releaseArgs]("ledger/release", script.Pipelined)
//	releaseScript.RunFlat(ctx, exec, releaseKeys{...}, releaseArgs{...})
//
// Bind reads the structs once, with reflection, into a field list (name,
// offset, kind); a call encodes them by reading each field at its offset, so
// the hot path does no reflection and boxes each argument exactly as the
// positional call it replaces did (measured: BenchmarkEncode). A test
// (internal/app TestEveryScriptIsBoundToItsHeader) checks every binding
// against its script's header: names, count and order.
//
// Field kinds: KEYS are strings; ARGV are strings (and string-kinded
// types), int/int64 (sent as integers), bool (sent as "1" or "0"). The last
// field of either struct may be a []string (ARGV also []int64 or []any): a
// variadic tail, sent element by element, named by the header's "N.." entry.
// None is the struct of a script without keys or arguments.

// None is the keys or arguments of a script that takes none.
type None struct{}

// Script is a script with its typed KEYS (K) and ARGV (A).
type Script[K, A any] struct {
	*Def
	keys, args *layout
}

// Bind declares the embedded script name (as Define does) with its KEYS
// struct K and ARGV struct A. It panics when K or A is not a valid binding
// struct: a programming error that any test of the package catches at init.
func Bind[K, A any](name string, opts ...func(*Def)) *Script[K, A] {
	kl := mustLayout[K](name, "KEYS", true)
	al := mustLayout[A](name, "ARGV", false)
	d := Define(name, opts...)
	d.keyNames, d.argNames, d.bound = kl.names(), al.names(), true
	return &Script[K, A]{Def: d, keys: kl, args: al}
}

// Run executes the script and returns its raw JSON result (Executor.Run).
func (s *Script[K, A]) Run(ctx context.Context, e *Executor, k K, a A) (json.RawMessage, error) {
	return e.Run(ctx, s.Def, s.keys.strings(unsafe.Pointer(&k)), s.args.values(unsafe.Pointer(&a))...)
}

// RunInto executes the script and unmarshals its JSON result into out
// (Executor.RunInto; out may be nil).
func (s *Script[K, A]) RunInto(ctx context.Context, e *Executor, out any, k K, a A) error {
	return e.RunInto(ctx, out, s.Def, s.keys.strings(unsafe.Pointer(&k)), s.args.values(unsafe.Pointer(&a))...)
}

// RunFlat executes a script with a flat reply (Executor.RunFlat).
func (s *Script[K, A]) RunFlat(ctx context.Context, e *Executor, k K, a A) ([]any, error) {
	return e.RunFlat(ctx, s.Def, s.keys.strings(unsafe.Pointer(&k)), s.args.values(unsafe.Pointer(&a))...)
}

// Encode returns the KEYS and ARGV a call sends, for tools and tests that
// drive the executor themselves (cmd/cycles-bench).
func (s *Script[K, A]) Encode(k K, a A) ([]string, []any) {
	return s.keys.strings(unsafe.Pointer(&k)), s.args.values(unsafe.Pointer(&a))
}

type kind uint8

const (
	kString kind = iota
	kInt
	kInt64
	kBool
	kStrings // tails
	kInt64s
	kAnys
)

type field struct {
	name string
	off  uintptr
	kind kind
}

// layout is a binding struct's fields in order; a tail (a slice) is last.
type layout struct {
	fields []field
	tail   bool
}

// names are the fields' names, the tail's as "<name>..".
func (l *layout) names() []string {
	out := make([]string, len(l.fields))
	for i, f := range l.fields {
		out[i] = f.name
		if l.tail && i == len(l.fields)-1 {
			out[i] += ".."
		}
	}
	return out
}

func mustLayout[T any](script, what string, keys bool) *layout {
	l, err := layoutOf(reflect.TypeFor[T](), keys)
	if err != nil {
		panic(fmt.Sprintf("script.Bind(%q): %s struct %v: %v", script, what, reflect.TypeFor[T](), err))
	}
	return l
}

func layoutOf(t reflect.Type, keys bool) (*layout, error) {
	if t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("not a struct")
	}
	l := &layout{}
	for i := range t.NumField() {
		sf := t.Field(i)
		name := sf.Tag.Get("lua")
		if name == "" || !validName(name) {
			return nil, fmt.Errorf("field %s: lua tag %q is not a header name ([a-z][a-z0-9_]*)", sf.Name, name)
		}
		if l.tail {
			return nil, fmt.Errorf("field %s follows the variadic tail", sf.Name)
		}
		f := field{name: name, off: sf.Offset}
		switch k := sf.Type.Kind(); {
		case k == reflect.String:
			f.kind = kString
		case k == reflect.Slice && sf.Type.Elem().Kind() == reflect.String:
			f.kind, l.tail = kStrings, true
		case keys:
			return nil, fmt.Errorf("field %s: a key must be a string or a []string tail, not %v", sf.Name, sf.Type)
		case k == reflect.Int:
			f.kind = kInt
		case k == reflect.Int64:
			f.kind = kInt64
		case k == reflect.Bool:
			f.kind = kBool
		case k == reflect.Slice && sf.Type.Elem().Kind() == reflect.Int64:
			f.kind, l.tail = kInt64s, true
		case k == reflect.Slice && sf.Type.Elem().Kind() == reflect.Interface && sf.Type.Elem().NumMethod() == 0:
			f.kind, l.tail = kAnys, true
		default:
			return nil, fmt.Errorf("field %s: unsupported type %v", sf.Name, sf.Type)
		}
		l.fields = append(l.fields, f)
	}
	return l, nil
}

func validName(s string) bool {
	for i, c := range s {
		if !(c >= 'a' && c <= 'z' || i > 0 && (c >= '0' && c <= '9' || c == '_')) {
			return false
		}
	}
	return s != ""
}

// The encoders read a field at its offset from the struct's address (p
// points to a K or an A, whose layout was checked by Bind): no reflection
// per call, and p does not escape.

func (l *layout) strings(p unsafe.Pointer) []string {
	n := len(l.fields)
	if n == 0 {
		return nil
	}
	var tail []string
	if l.tail {
		n--
		tail = *(*[]string)(unsafe.Add(p, l.fields[n].off))
	}
	out := make([]string, n, n+len(tail))
	for i, f := range l.fields[:n] {
		out[i] = *(*string)(unsafe.Add(p, f.off))
	}
	return append(out, tail...)
}

func (l *layout) values(p unsafe.Pointer) []any {
	n := len(l.fields)
	if n == 0 {
		return nil
	}
	tailLen := 0
	if l.tail {
		n--
		// Every slice header has its length at the same place.
		tailLen = len(*(*[]byte)(unsafe.Add(p, l.fields[n].off)))
	}
	out := make([]any, n, n+tailLen)
	for i, f := range l.fields[:n] {
		q := unsafe.Add(p, f.off)
		switch f.kind {
		case kString:
			out[i] = *(*string)(q)
		case kInt:
			out[i] = int64(*(*int)(q))
		case kInt64:
			out[i] = *(*int64)(q)
		case kBool:
			if *(*bool)(q) {
				out[i] = "1"
			} else {
				out[i] = "0"
			}
		}
	}
	if l.tail {
		q := unsafe.Add(p, l.fields[n].off)
		switch l.fields[n].kind {
		case kStrings:
			for _, s := range *(*[]string)(q) {
				out = append(out, s)
			}
		case kInt64s:
			for _, v := range *(*[]int64)(q) {
				out = append(out, v)
			}
		case kAnys:
			out = append(out, *(*[]any)(q)...)
		}
	}
	return out
}

// Rebind is another Go view of the bound script d: K and A must name the
// same KEYS and ARGV, in the same order, as d's binding (which the header
// test checks), so the view cannot drift from the script either. For tests
// that send what the domain's types cannot hold (an out-of-range amount as
// a string, to prove the script refuses it).
func Rebind[K, A any](d *Def) (*Script[K, A], error) {
	if !d.bound {
		return nil, fmt.Errorf("%s: no binding to rebind", d.name)
	}
	kl, err := layoutOf(reflect.TypeFor[K](), true)
	if err != nil {
		return nil, fmt.Errorf("%s: KEYS struct %v: %w", d.name, reflect.TypeFor[K](), err)
	}
	al, err := layoutOf(reflect.TypeFor[A](), false)
	if err != nil {
		return nil, fmt.Errorf("%s: ARGV struct %v: %w", d.name, reflect.TypeFor[A](), err)
	}
	if !slices.Equal(kl.names(), d.keyNames) || !slices.Equal(al.names(), d.argNames) {
		return nil, fmt.Errorf("%s: rebinding KEYS %v ARGV %v, bound KEYS %v ARGV %v", d.name,
			kl.names(), al.names(), d.keyNames, d.argNames)
	}
	return &Script[K, A]{Def: d, keys: kl, args: al}, nil
}
