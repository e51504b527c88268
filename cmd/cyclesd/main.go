// Command cyclesd is the Cycles budget authority: the gRPC API and the
// background workers (expiry sweeper) in one process.
//
// With no Redis address configured it runs in dev mode on an embedded,
// non-durable store and seeds a demo tenant, API key and budget.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/cyclesgo/cycles-go/pkg/app"
	"github.com/cyclesgo/cycles-go/pkg/config"
)

func main() {
	// A high allocation rate on a small live heap: the default GOGC=100
	// collects constantly; 400 cut cyclesd's CPU per reserve by ~15%
	// (BENCHMARKS.md). An explicit GOGC in the environment wins.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	cfg, err := config.FromOS()
	if err != nil {
		fmt.Fprintln(os.Stderr, "cyclesd:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := app.Run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "cyclesd:", err)
		os.Exit(1)
	}
}
