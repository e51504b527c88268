package redistest

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"go.uber.org/goleak"
)

// MainOptions tune Main.
type MainOptions struct {
	// Setup runs before the tests, after the private temp dir is in place
	// (so what it creates there is checked too); teardown runs after them.
	Setup func() (teardown func(), err error)
	// LeakCheck fails the run when goroutines started by the tests are
	// still running after them (go.uber.org/goleak), for packages that start
	// goroutines (watchers, pollers, sweepers, pipelines).
	LeakCheck bool
	// IgnoreLeaks adds goroutines goleak should not report.
	IgnoreLeaks []goleak.Option
}

// Main runs a package's tests from its TestMain and proves they leave
// nothing behind: the tests get a private TMPDIR, the shared redis-server and
// Cluster of this binary (Shared, SharedClient) are stopped and their
// directories removed, and the run fails if anything is left in that TMPDIR
// (a temp dir a test created without t.TempDir or did not remove) or, with
// LeakCheck, if a goroutine outlives the tests. Main calls os.Exit.
func Main(m mainRunner, o MainOptions) {
	os.Exit(runMain(m, o))
}

// mainRunner is *testing.M.
type mainRunner interface{ Run() int }

func runMain(m mainRunner, o MainOptions) int {
	base := os.Getenv("TMPDIR")
	tmp, err := os.MkdirTemp("", "cycles-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "redistest.Main: private temp dir:", err)
		return 1
	}
	restore := func() {
		_ = os.RemoveAll(tmp)
		if base == "" {
			_ = os.Unsetenv("TMPDIR")
		} else {
			_ = os.Setenv("TMPDIR", base)
		}
	}
	defer restore()
	if err := os.Setenv("TMPDIR", tmp); err != nil {
		fmt.Fprintln(os.Stderr, "redistest.Main: set TMPDIR:", err)
		return 1
	}
	leakOpts := append([]goleak.Option{goleak.IgnoreCurrent()}, o.IgnoreLeaks...)

	code := 1
	teardown := func() {}
	if o.Setup != nil {
		td, err := o.Setup()
		if err != nil {
			fmt.Fprintln(os.Stderr, "setup:", err)
		}
		if td != nil {
			teardown = td
		}
		if err == nil {
			code = m.Run()
		}
	} else {
		code = m.Run()
	}
	teardown()
	StopShared()

	if code == 0 && o.LeakCheck {
		if err := goleak.Find(leakOpts...); err != nil {
			fmt.Fprintf(os.Stderr, "goroutines outlived the tests (goleak):\n%v\n", err)
			code = 1
		}
	}
	if left := leftovers(tmp); len(left) > 0 && code == 0 {
		fmt.Fprintf(os.Stderr, "temp files left behind by the tests (use t.TempDir or remove them): %v\n", left)
		code = 1
	}
	return code
}

// leftovers lists what is left in dir.
func leftovers(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", dir, err)}
	}
	var out []string
	for _, e := range entries {
		out = append(out, filepath.Join(dir, e.Name()))
	}
	sort.Strings(out)
	return out
}

// StopShared stops the shared redis-server and the shared Cluster of this
// test binary, if they were started, and removes their directories.
func StopShared() {
	shared.Stop((*Server).Stop)
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if sharedCluster != nil {
		for _, s := range sharedCluster.Masters {
			s.Stop()
			_ = os.RemoveAll(s.Dir)
		}
		sharedCluster = nil
	}
}
