// Command cycles-bench is the load generator and regression gate of cyclesd.
//
//	cycles-bench [run flags]                  run the benchmark, write a JSON result
//	cycles-bench check -baseline F R1 R2 R3   medians of runs vs the baseline (exit 1 on regression)
//	cycles-bench median -o F R1 R2 R3         write the median result (a new baseline)
//	cycles-bench serve [cyclesd flags]        cyclesd in-process, with /debug/pprof (used for -profile)
//	cycles-bench feed [flags]                 the all-tenant event feed: one subscriber, an expiry backlog over many tenants, idle cost
//	cycles-bench scriptcost [flags]           instructions Redis executes per script call (redis-server under callgrind)
//	cycles-bench archive [flags]              the PostgreSQL archive: catch-up rate, lag under load, Redis memory plateau
//	cycles-bench gogc [flags]                 cyclesd CPU per reserve under several GOGC values, interleaved in one run
//
// A run starts its own redis-server and cyclesd (or targets given addresses),
// provisions tenants, API keys and budgets through the AdminService, and
// drives cyclesd over gRPC with the generated cycles.v1 clients at each
// client count, on a shared budget and on independent agent budgets, for
// reserve, commit, the reserve→commit lifecycle, decide and rate-limit
// checks. After each group it verifies the ledger through AdminService
// GetBudget: the Redis totals must equal what the successful calls imply.
// It then measures the ceiling (the reserve script straight against the same
// Redis through internal/script, same KEYS/ARGV shape) and the drain of an expiry
// backlog. See BENCHMARKS.md.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "cycles-bench:", err)
		os.Exit(1)
	}
}

// run runs one subcommand; main exits only after its deferred calls ran.
func run(args []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	cmd := "run"
	if len(args) > 0 && (args[0] == "run" || args[0] == "check" || args[0] == "median" || args[0] == "serve" || args[0] == "feed" || args[0] == "scriptcost" || args[0] == "archive" || args[0] == "gogc") {
		cmd, args = args[0], args[1:]
	}
	var err error
	switch cmd {
	case "run":
		err = runMain(ctx, args)
	case "check":
		err = checkMain(args)
	case "median":
		err = medianMain(args)
	case "serve":
		err = serveMain(ctx, args)
	case "feed":
		err = feedMain(ctx, args)
	case "scriptcost":
		err = scriptcostMain(ctx, args)
	case "archive":
		err = archiveMain(ctx, args)
	case "gogc":
		err = gogcMain(ctx, args)
	}
	return err
}
