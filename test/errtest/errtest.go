// Package errtest checks the error of one case of a table-driven test, the
// way every such table in cyclesd spells it: a fragment the error must
// mention, or "" for no error at all.
package errtest

import (
	"strings"
	"testing"
)

// Want checks err against want: with want "" err must be nil; otherwise err
// must be an error that mentions want. It reports whether the case expected
// an error, so the caller's case can end there:
//
//	if errtest.Want(t, err, tc.wantErr) {
//		return
//	}
func Want(tb testing.TB, err error, want string) (refused bool) {
	tb.Helper()
	if want == "" {
		if err != nil {
			tb.Fatalf("unexpected error: %v", err)
		}
		return false
	}
	if err == nil || !strings.Contains(err.Error(), want) {
		tb.Fatalf("err = %v, want one mentioning %q", err, want)
	}
	return true
}

// Panics calls f and fails tb with msg (Errorf: a table goes on to its next
// case) when f returns instead of panicking, for declarations whose mistakes
// are programming errors found when they are built.
func Panics(tb testing.TB, msg string, f func()) {
	tb.Helper()
	defer func() {
		if recover() == nil {
			tb.Errorf("%s", msg)
		}
	}()
	f()
}

// ErrOf is the error of a call whose result a case does not look at:
//
//	call: func(ctx context.Context) error { return errtest.ErrOf(c.Get(ctx, req)) },
func ErrOf[T any](_ T, err error) error { return err }
