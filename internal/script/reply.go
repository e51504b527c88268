package script

import (
	"fmt"
	"reflect"
	"strings"
	"unsafe"
)

// Typed flat replies.
//
// A flat reply's layout (RunFlat: the fields after the executor's header)
// is declared once, in Go, as a struct whose fields are the reply's fields
// in order, each named by a `flat` tag:
//
//	type releaseReply struct {
//		Replay   bool        `flat:"replay,extra"`
//		Unit     string      `flat:"unit"`
//		Released *num        `flat:"released"`
//		Balances balanceList `flat:"balances"`
//	}
//	var releaseLayout = script.ReplyOf[releaseReply]("ledger/release")
//	r, err := releaseLayout.Read(reply)
//
// The Go reader is that struct: ReplyOf reads it once, with reflection, into
// a field list (name, offset, kind) and Read fills a T by offset, so no code
// reads a reply by position. The same field list is what the tests compare
// with the Lua library's declared layout and what docs/design.md's reply
// table is generated from (Fields).
//
// Field kinds, by Go type: bool (a 0/1 flag), string-kinded (a string),
// int64-kinded (an amount: an integer or a decimal string, '' = 0), a
// pointer to an int64-kinded type (an optional amount, '' = nil), []string
// (a counted list: its length, then its values) and any type whose pointer
// implements FlatValue (its own encoding, e.g. a packed balance list).
// Tag options: "extra" marks what only the live call knows (not part of the
// answer a replay rebuilds; documentation only), "trailing" a field that
// some answers leave out at the end: reading stops before the first absent
// trailing field.

// FlatValue is a reply field with its own encoding, read from f.
type FlatValue interface {
	ReadFlat(f *FlatReader)
}

// ReplyLayout is the layout of a flat reply read into a T.
type ReplyLayout[T any] struct {
	name   string
	fields []replyField
}

type replyKind uint8

const (
	rString replyKind = iota
	rInt
	rOpt
	rFlag
	rList
	rValue
)

type replyField struct {
	ReplyField
	off  uintptr
	kind replyKind
	typ  reflect.Type // rValue: the field's type
}

// ReplyField describes one field of a flat reply layout.
type ReplyField struct {
	Name string
	// Kind is "flag", "string", "amount", "optional amount", "list" or the
	// FlatValue's type name.
	Kind string
	// Extra: known only to the live call (a replay answers the rest).
	Extra bool
	// Trailing: some answers end before this field.
	Trailing bool
}

var flatValueType = reflect.TypeFor[FlatValue]()

// ReplyOf declares the flat reply layout of script name read into a T. It
// panics when T is not a valid layout struct: a programming error that any
// test of the declaring package catches at init.
func ReplyOf[T any](name string) *ReplyLayout[T] {
	t := reflect.TypeFor[T]()
	fields, err := replyFieldsOf(t)
	if err != nil {
		panic(fmt.Sprintf("script.ReplyOf(%q): %v: %v", name, t, err))
	}
	return &ReplyLayout[T]{name: name, fields: fields}
}

func replyFieldsOf(t reflect.Type) ([]replyField, error) {
	if t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("not a struct")
	}
	var out []replyField
	trailing := false
	for i := range t.NumField() {
		sf := t.Field(i)
		tag, opts, _ := strings.Cut(sf.Tag.Get("flat"), ",")
		if tag == "" || !validName(tag) {
			return nil, fmt.Errorf("field %s: flat tag %q is not a field name ([a-z][a-z0-9_]*)", sf.Name, tag)
		}
		f := replyField{ReplyField: ReplyField{Name: tag}, off: sf.Offset}
		for _, o := range strings.Split(opts, ",") {
			switch o {
			case "":
			case "extra":
				f.Extra = true
			case "trailing":
				f.Trailing = true
			default:
				return nil, fmt.Errorf("field %s: unknown flat option %q", sf.Name, o)
			}
		}
		if trailing && !f.Trailing {
			return nil, fmt.Errorf("field %s follows a trailing field", sf.Name)
		}
		trailing = f.Trailing
		switch k := sf.Type.Kind(); {
		case reflect.PointerTo(sf.Type).Implements(flatValueType):
			f.kind, f.typ, f.Kind = rValue, sf.Type, sf.Type.Name()
		case k == reflect.Bool:
			f.kind, f.Kind = rFlag, "flag"
		case k == reflect.String:
			f.kind, f.Kind = rString, "string"
		case k == reflect.Int64:
			f.kind, f.Kind = rInt, "amount"
		case k == reflect.Pointer && sf.Type.Elem().Kind() == reflect.Int64:
			f.kind, f.Kind = rOpt, "optional amount"
		case k == reflect.Slice && sf.Type.Elem().Kind() == reflect.String:
			f.kind, f.Kind = rList, "list"
		default:
			return nil, fmt.Errorf("field %s: unsupported type %v", sf.Name, sf.Type)
		}
		out = append(out, f)
	}
	return out, nil
}

// Name is the script whose reply this is.
func (l *ReplyLayout[T]) Name() string { return l.name }

// Fields are the layout's fields in reply order.
func (l *ReplyLayout[T]) Fields() []ReplyField {
	out := make([]ReplyField, len(l.fields))
	for i, f := range l.fields {
		out[i] = f.ReplyField
	}
	return out
}

// Read reads a whole flat reply (as RunFlat returned it) into a T: a
// missing, malformed or extra element is an error naming the script.
func (l *ReplyLayout[T]) Read(reply []any) (*T, error) {
	var out T
	f := NewFlatReader(reply)
	p := unsafe.Pointer(&out)
	for _, fd := range l.fields {
		if fd.Trailing && !f.More() {
			break
		}
		q := unsafe.Add(p, fd.off)
		switch fd.kind {
		case rString:
			*(*string)(q) = f.Str()
		case rInt:
			*(*int64)(q) = f.Int()
		case rOpt:
			if v, ok := f.Opt(); ok {
				*(**int64)(q) = &v
			}
		case rFlag:
			*(*bool)(q) = f.Flag()
		case rList:
			*(*[]string)(q) = f.Strs()
		case rValue:
			reflect.NewAt(fd.typ, q).Interface().(FlatValue).ReadFlat(f)
		}
	}
	if err := f.End(); err != nil {
		return nil, fmt.Errorf("%s: decode reply: %w", l.name, err)
	}
	return &out, nil
}
