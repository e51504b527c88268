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
	"syscall"

	"github.com/cyclesgo/cycles-go/pkg/app"
	"github.com/cyclesgo/cycles-go/pkg/config"
)

func main() {
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
