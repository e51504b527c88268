package redistest

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestMain(m *testing.M) { Main(m, MainOptions{LeakCheck: true}) }

// runFunc adapts a function to the runner Main drives.
type runFunc func() int

func (f runFunc) Run() int { return f() }

// What Main promises: after the tests nothing they made survives, and what
// would have survived fails the run.
func TestMainLeavesNothingBehind(t *testing.T) {
	t.Run("shared server stopped and its dir removed", func(t *testing.T) {
		var dir string
		var pid int
		code := runMain(runFunc(func() int {
			s := Shared(t)
			dir, pid = s.Dir, s.cmd.Process.Pid
			if err := s.Client(t).Ping(context.Background()).Err(); err != nil {
				t.Error(err)
			}
			return 0
		}), MainOptions{})
		if code != 0 {
			t.Fatalf("code %d, want 0", code)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("shared server dir %s survived: %v", dir, err)
		}
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("shared redis-server %d still running", pid)
		}
	})
	t.Run("a temp dir left behind fails the run and is removed", func(t *testing.T) {
		var left string
		code := runMain(runFunc(func() int {
			d, err := os.MkdirTemp("", "forgotten-")
			if err != nil {
				t.Fatal(err)
			}
			left = d
			return 0
		}), MainOptions{})
		if code == 0 {
			t.Error("a leftover temp dir did not fail the run")
		}
		if _, err := os.Stat(left); !os.IsNotExist(err) {
			t.Errorf("%s survived", left)
		}
	})
	t.Run("t.TempDir passes", func(t *testing.T) {
		code := runMain(runFunc(func() int {
			// What a test's t.TempDir does: create under TMPDIR, remove after.
			d, err := os.MkdirTemp("", "tempdir-")
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(d, "f"), []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			_ = os.RemoveAll(d)
			return 0
		}), MainOptions{})
		if code != 0 {
			t.Errorf("code %d, want 0", code)
		}
	})
	t.Run("a leaked goroutine fails the run", func(t *testing.T) {
		stop := make(chan struct{})
		defer close(stop)
		code := runMain(runFunc(func() int {
			go func() { <-stop }()
			return 0
		}), MainOptions{LeakCheck: true})
		if code == 0 {
			t.Error("a leaked goroutine did not fail the run")
		}
	})
	t.Run("failing tests keep their code", func(t *testing.T) {
		if code := runMain(runFunc(func() int { return 3 }), MainOptions{}); code != 3 {
			t.Errorf("code %d, want 3", code)
		}
	})
	t.Run("setup and teardown run around the tests", func(t *testing.T) {
		var order []string
		code := runMain(runFunc(func() int { order = append(order, "tests"); return 0 }), MainOptions{
			Setup: func() (func(), error) {
				order = append(order, "setup")
				return func() { order = append(order, "teardown") }, nil
			},
		})
		if code != 0 || len(order) != 3 || order[0] != "setup" || order[2] != "teardown" {
			t.Errorf("code %d, order %v", code, order)
		}
	})
}

// TestPortNeverRepeats: ports picked one after the other for servers that
// have not bound yet are distinct, even when the kernel offers a just-closed
// port again.
func TestPortNeverRepeats(t *testing.T) {
	seen := map[int]bool{}
	for range 300 {
		port, err := Port()
		if err != nil {
			t.Fatal(err)
		}
		if seen[port] {
			t.Fatalf("port %d handed out twice", port)
		}
		seen[port] = true
	}
}
