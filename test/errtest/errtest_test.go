package errtest

import (
	"errors"
	"testing"
)

// fakeTB records a Fatalf instead of stopping the test.
type fakeTB struct {
	testing.TB
	failed bool
}

func (f *fakeTB) Helper()               {}
func (f *fakeTB) Fatalf(string, ...any) { f.failed = true }
func (f *fakeTB) Errorf(string, ...any) { f.failed = true }

func TestWant(t *testing.T) {
	for _, tc := range []struct {
		name            string
		err             error
		want            string
		refused, failed bool
	}{
		{"no error wanted, none", nil, "", false, false},
		{"no error wanted, one", errors.New("boom"), "", false, true},
		{"error wanted, mentioned", errors.New("bad -archive-dsn"), "-archive-dsn", true, false},
		{"error wanted, another", errors.New("boom"), "-archive-dsn", true, true},
		{"error wanted, none", nil, "-archive-dsn", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeTB{}
			if got := Want(f, tc.err, tc.want); got != tc.refused || f.failed != tc.failed {
				t.Fatalf("Want = %v, failed %v; want %v, failed %v", got, f.failed, tc.refused, tc.failed)
			}
		})
	}
}

func TestPanics(t *testing.T) {
	for _, tc := range []struct {
		name   string
		f      func()
		failed bool
	}{
		{"panics", func() { panic("bad declaration") }, false},
		{"panics with nil error", func() { var err error; panic(err) }, false},
		{"returns", func() {}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeTB{}
			Panics(f, "no panic", tc.f)
			if f.failed != tc.failed {
				t.Fatalf("failed %v, want %v", f.failed, tc.failed)
			}
		})
	}
}

func TestErrOf(t *testing.T) {
	boom := errors.New("boom")
	call := func(fail bool) (*int, error) {
		if fail {
			return nil, boom
		}
		return new(int), nil
	}
	if err := ErrOf(call(true)); !errors.Is(err, boom) {
		t.Fatalf("ErrOf = %v, want %v", err, boom)
	}
	if err := ErrOf(call(false)); err != nil {
		t.Fatalf("ErrOf = %v, want nil", err)
	}
}
