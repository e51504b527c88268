package script

import (
	"fmt"
	"strconv"
)

// FlatReader reads the fields of a flat reply (RunFlat) in order, from
// FlatFields on. Fields are strings (bulk replies) or int64s (Lua numbers);
// the first malformed or missing field sets the reader's error and every
// later read returns a zero value, so a caller reads a whole layout and
// checks End once: a malformed reply is an error, never a panic or a
// half-read answer.
type FlatReader struct {
	a   []any
	i   int
	err error
}

// NewFlatReader reads the fields of reply, as RunFlat returned it.
func NewFlatReader(reply []any) *FlatReader { return &FlatReader{a: reply, i: FlatFields} }

// Err is the first read's failure, if any.
func (f *FlatReader) Err() error { return f.err }

// Fail records a failure at the current field (the first one wins).
func (f *FlatReader) Fail(format string, args ...any) {
	if f.err == nil {
		f.err = fmt.Errorf("field %d: "+format, append([]any{f.i}, args...)...)
	}
}

// More reports whether fields remain (a layout's optional trailing fields,
// absent from answers stored before they existed).
func (f *FlatReader) More() bool { return f.err == nil && f.i < len(f.a) }

// End reports a malformed reply: the first read's failure, or elements the
// layout did not read.
func (f *FlatReader) End() error {
	if f.err == nil && f.i != len(f.a) {
		f.Fail("%d trailing elements", len(f.a)-f.i)
	}
	return f.err
}

func (f *FlatReader) next() any {
	if f.err != nil {
		return nil
	}
	if f.i >= len(f.a) {
		f.Fail("reply ends early (%d elements)", len(f.a))
		return nil
	}
	v := f.a[f.i]
	f.i++
	return v
}

// Str reads a string (an integer reply as its decimal form).
func (f *FlatReader) Str() string {
	switch v := f.next().(type) {
	case string:
		return v
	case int64:
		return strconv.FormatInt(v, 10)
	case nil:
		return ""
	default:
		f.Fail("unexpected %T", v)
		return ""
	}
}

// Int reads an int64: an integer reply or a decimal string (an empty string is 0).
func (f *FlatReader) Int() int64 {
	switch v := f.next().(type) {
	case int64:
		return v
	case string:
		if v == "" {
			return 0
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			f.Fail("amount %q: %v", v, err)
		}
		return n
	case nil:
		return 0
	default:
		f.Fail("unexpected %T", v)
		return 0
	}
}

// Opt reads an optional int64: an empty string is absent (false).
func (f *FlatReader) Opt() (int64, bool) {
	if f.err == nil && f.i < len(f.a) {
		if s, ok := f.a[f.i].(string); ok && s == "" {
			f.i++
			return 0, false
		}
	}
	return f.Int(), true
}

// Flag reads a 0/1 flag (an integer reply, or "1").
func (f *FlatReader) Flag() bool {
	switch v := f.next().(type) {
	case int64:
		return v != 0
	case string:
		return v == "1"
	default:
		return false
	}
}

// Count reads a list length, bounded by what is left of the reply (per
// elements an entry).
func (f *FlatReader) Count(per int) int {
	n := int(f.Int())
	if n < 0 || n*per > len(f.a)-f.i {
		f.Fail("list of %d entries does not fit the reply", n)
		return 0
	}
	return n
}

// Strs reads a counted list of strings (nil when empty).
func (f *FlatReader) Strs() []string {
	n := f.Count(1)
	if n == 0 {
		return nil
	}
	out := make([]string, n)
	for i := range out {
		out[i] = f.Str()
	}
	return out
}
