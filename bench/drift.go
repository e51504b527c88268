package bench

import (
	"fmt"
	"strings"
)

// Drift lists what differs between how baseline and current were taken
// that moves the figures on its own: the machine, Redis and Go, the run's
// shape (clients, shapes, operations, window), cyclesd's GOGC and its flags
// (listen addresses aside). The gate still compares the figures; a
// non-empty drift says the baseline is stale for this run and should be
// refreshed (cycles-bench median) before a regression is believed.
func Drift(baseline, current *Result) []string {
	var out []string
	diff := func(what string, b, c any) {
		if fmt.Sprint(b) != fmt.Sprint(c) {
			out = append(out, fmt.Sprintf("%s: baseline %v, this run %v", what, b, c))
		}
	}
	bm, cm := baseline.Machine, current.Machine
	diff("CPUs", bm.NumCPU, cm.NumCPU)
	diff("CPU model", bm.CPUModel, cm.CPUModel)
	diff("Redis", bm.Redis, cm.Redis)
	diff("Go", bm.GoVersion, cm.GoVersion)
	bc, cc := baseline.Config, current.Config
	diff("clients", bc.Clients, cc.Clients)
	diff("shapes", bc.Shapes, cc.Shapes)
	diff("operations", bc.Ops, cc.Ops)
	diff("window (s)", bc.DurationS, cc.DurationS)
	diff("warm-up (s)", bc.WarmupS, cc.WarmupS)
	diff("gRPC connections", bc.Conns, cc.Conns)
	diff("ceiling connections", bc.CeilingConns, cc.CeilingConns)
	diff("backlog", bc.Backlog, cc.Backlog)
	diff("allocation", bc.Allocated, cc.Allocated)
	diff("processes started by the tool", bc.StartedProcesses, cc.StartedProcesses)
	bg, cg := bc.ServerGOGC, cc.ServerGOGC
	if bg == "" {
		bg = "not recorded (cyclesd set GOGC=400 itself until commit 95848c9)"
	}
	if cg == "" {
		cg = "not recorded"
	}
	diff("cyclesd GOGC", bg, cg)
	diff("cyclesd flags", serverFlags(bc.ServerArgs), serverFlags(cc.ServerArgs))
	return out
}

// serverFlags are a run's cyclesd flags and environment without the values
// that change from run to run (listen and Redis addresses).
func serverFlags(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch name {
		case "listen", "http-listen", "redis-addrs":
			if !hasValue && strings.HasPrefix(a, "-") && i+1 < len(args) {
				i++
			}
			continue
		}
		out = append(out, a)
	}
	return out
}
