package script

import (
	"strings"
	"testing"

	"github.com/cyclesgo/cycles-go/test/errtest"
)

// The flat reader takes a reply field by field and turns a short, long or
// malformed reply into an error naming the field, never a panic.
func TestFlatReader(t *testing.T) {
	head := []any{"OK", FlatVersion, "", ""}
	reply := func(fields ...any) []any { return append(append([]any{}, head...), fields...) }
	read := func(f *FlatReader) (bool, int64, int64, bool, []string, string) {
		flag, n := f.Flag(), f.Int()
		opt, ok := f.Opt()
		return flag, n, opt, ok, f.Strs(), f.Str()
	}
	for _, tc := range []struct {
		name  string
		reply []any
		err   string
	}{
		{"well formed", reply(int64(1), "9223372036854775807", "", int64(2), "a", "b", int64(7)), ""},
		{"short", reply(int64(1), "5"), "reply ends early"},
		{"trailing", reply(int64(1), "5", "", int64(0), "x", "y"), "1 trailing elements"},
		{"bad amount", reply(int64(1), "1e3", "", int64(0), "x"), `amount "1e3"`},
		{"list too long", reply(int64(1), "5", "", int64(9), "x"), "does not fit"},
		{"wrong type", reply(int64(1), []any{}, "", int64(0), "x"), "unexpected []interface {}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFlatReader(tc.reply)
			flag, n, opt, ok, list, last := read(f)
			err := f.End()
			if errtest.Want(t, err, tc.err) {
				return
			}
			if err != nil || !flag || n != 1<<63-1 || ok || opt != 0 || strings.Join(list, ",") != "a,b" || last != "7" {
				t.Fatalf("read %v %d %d %v %q %q, err %v", flag, n, opt, ok, list, last, err)
			}
		})
	}
}
