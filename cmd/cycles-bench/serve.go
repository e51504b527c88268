package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	_ "net/http/pprof" // the profile endpoint of serve mode
	"os"
	"time"

	"github.com/cyclesgo/cycles-go/internal/app"
	cyclesconfig "github.com/cyclesgo/cycles-go/internal/config"
)

// serveMain runs cyclesd in this process exactly as cmd/cyclesd does
// (config.Load + app.Run), plus net/http/pprof on -pprof-addr, so a run can
// take a CPU profile of the server under load without changing cyclesd.
// Usage: cycles-bench serve -pprof-addr 127.0.0.1:6060 -- <cyclesd flags>
func serveMain(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	pprofAddr := fs.String("pprof-addr", "127.0.0.1:6060", "address of /debug/pprof")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := cyclesconfig.Load(fs.Args(), os.Getenv)
	if err != nil {
		return err
	}
	hs := &http.Server{Addr: *pprofAddr, Handler: http.DefaultServeMux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := hs.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintln(os.Stderr, "pprof listener:", err)
		}
	}()
	defer hs.Close()
	return app.Run(ctx, cfg, os.Stdout)
}
