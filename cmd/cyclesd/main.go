// Command cyclesd is the Cycles budget authority: the gRPC API and the
// background workers (expiry sweeper) in one process.
//
// With no Redis address configured it runs in dev mode on an embedded,
// non-durable store and seeds a demo tenant, API key and budget.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/cyclesgo/cycles-go/internal/app"
	"github.com/cyclesgo/cycles-go/internal/config"
)

func main() {
	// The garbage collector keeps Go's default (GOGC=100): the heap may grow
	// to twice what is live before a collection. GOGC=400 costs ~15% less
	// CPU per reserve (BENCHMARKS.md) but lets the heap reach five times
	// what is live, and a flood of cheap refused requests (test/abuse
	// TestHeadersFloodNeverRead: 12-22 MB live) then took RSS up by 70-170
	// MB, past issue 23's 64 MB bound, where GOGC=100 stays within 12-16 MB
	// (docs/limits.md). Set GOGC in the environment to trade memory for CPU.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is cyclesd without the process: it returns the exit code. -help prints
// the usage to stdout and exits 0 (asked for, not an error); a bad flag or
// setting exits 2 (so does a positional argument: cyclesd takes flags only),
// a failure while running exits 1. `cyclesd version` and -version print the
// build's version, commit and date and exit 0.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	for _, a := range args {
		if a == "-h" || a == "-help" || a == "--help" {
			config.Usage(stdout)
			return 0
		}
	}
	if isVersionRequest(args) {
		readVersion(debug.ReadBuildInfo()).print(stdout)
		return 0
	}
	cfg, err := config.LoadWithOutput(args, getenv, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "cyclesd:", err)
		return 2
	}
	if err := app.Run(ctx, cfg, stdout); err != nil {
		fmt.Fprintln(stderr, "cyclesd:", err)
		return 1
	}
	return 0
}
