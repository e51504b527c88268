package main

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/cyclesgo/cycles-go/bench"
)

// maxErrorRate fails a run whose cell errors exceed 1% of its calls (the
// reference benchmark's rule); any ledger mismatch fails it too.
const maxErrorRate = 0.01

// headlineSpec is one gated figure: a cell's p50 or throughput, the
// ceiling ratio or the backlog drain time.
type headlineSpec struct {
	name, op, shape string
	clients         int
	metric          string // p50 | tput
}

var headlineSpecs = []headlineSpec{
	{"reserve_tput_50c_shared", "reserve", "shared", 50, "tput"},
	{"reserve_tput_50c_independent", "reserve", "independent", 50, "tput"},
	{"reserve_tput_200c_shared", "reserve", "shared", 200, "tput"},
	{"reserve_tput_200c_independent", "reserve", "independent", 200, "tput"},
	{"reserve_p50_1c_shared", "reserve", "shared", 1, "p50"},
	{"commit_p50_1c_shared", "commit", "shared", 1, "p50"},
	{"decide_p50_1c_shared", "decide", "shared", 1, "p50"},
	{"ratelimit_p50_1c_shared", "ratelimit", "shared", 1, "p50"},
	{"commit_tput_50c_shared", "commit", "shared", 50, "tput"},
	{"lifecycle_tput_50c_shared", "lifecycle", "shared", 50, "tput"},
	{"decide_tput_50c_shared", "decide", "shared", 50, "tput"},
	{"ratelimit_tput_50c_shared", "ratelimit", "shared", 50, "tput"},
	{"ratelimit_tput_50c_independent", "ratelimit", "independent", 50, "tput"},
}

// finish computes the headline figures, the targets and the failures.
func finish(r *bench.Result) {
	for _, h := range headlineSpecs {
		c := r.Cell(h.op, h.shape, h.clients)
		if c == nil {
			continue
		}
		switch h.metric {
		case "tput":
			r.Headline = append(r.Headline, bench.Headline{Name: h.name, Value: c.Throughput, Unit: "ops/s", Better: bench.Higher})
		case "p50":
			r.Headline = append(r.Headline, bench.Headline{Name: h.name, Value: c.Latency.P50, Unit: "ms", Better: bench.Lower})
		}
	}
	ratio := 0.0
	if c := r.Cell("reserve", "shared", 50); c != nil && r.Ceiling != nil && r.Ceiling.Throughput > 0 {
		ratio = round3(c.Throughput / r.Ceiling.Throughput)
		r.Headline = append(r.Headline, bench.Headline{Name: "ceiling_ratio_50c_shared", Value: ratio, Unit: "fraction", Better: bench.Higher})
	}
	if r.Physical != nil && r.Ceiling != nil && r.Physical.Throughput > 0 {
		r.Physical.Ratio = round3(r.Ceiling.Throughput / r.Physical.Throughput)
		r.Headline = append(r.Headline, bench.Headline{Name: "ceiling_physical_ratio", Value: r.Physical.Ratio, Unit: "fraction", Better: bench.Higher})
	}
	if m := r.Memory; m != nil && m.Reservations > 0 {
		r.Headline = append(r.Headline,
			bench.Headline{Name: "memory_settled_bytes", Value: m.SettledBytes, Unit: "B", Better: bench.Lower},
			bench.Headline{Name: "memory_active_bytes", Value: m.ActiveBytes, Unit: "B", Better: bench.Lower})
	}
	if r.Backlog != nil {
		r.Headline = append(r.Headline, bench.Headline{Name: "backlog_drain_s", Value: r.Backlog.DrainS, Unit: "s", Better: bench.Lower})
	}

	for _, c := range r.Cells {
		r.Errors += c.Errors
		if total := c.Ops + c.Errors; total > 0 && float64(c.Errors)/float64(total) > maxErrorRate {
			r.Failed = append(r.Failed, fmt.Sprintf("%s/%s/%d: %d errors in %d calls (%v)", c.Op, c.Shape, c.Clients, c.Errors, total, c.ErrorCodes))
		}
	}
	for _, l := range r.Ledger {
		r.Mismatches += l.Mismatches
		if l.Mismatches > 0 {
			r.Failed = append(r.Failed, fmt.Sprintf("ledger mismatch in %s: %s", l.Group, strings.Join(l.Details, "; ")))
		}
	}
	if r.Physical != nil && r.Physical.Errors > 0 {
		r.Failed = append(r.Failed, fmt.Sprintf("physical limit: %d script errors", r.Physical.Errors))
	}
	if m := r.Memory; m != nil && m.Errors > 0 && float64(m.Errors) > maxErrorRate*float64(2*m.Reservations+m.Errors) {
		// The cells' rule: more than 1% of the calls (reserves + commits).
		r.Failed = append(r.Failed, fmt.Sprintf("memory: %d errors (%v)", m.Errors, m.ErrorCodes))
	}
	if r.Ceiling != nil && r.Ceiling.Errors > 0 {
		r.Failed = append(r.Failed, fmt.Sprintf("ceiling: %d script errors", r.Ceiling.Errors))
	}

	// The targets.
	target := func(name, want string, value float64, unit string, met bool, margin string) {
		r.Targets = append(r.Targets, bench.Target{Name: name, Want: want, Value: value, Unit: unit, Met: met, Margin: margin})
	}
	rel := func(value, want float64, higher bool) string {
		d := (value - want) / want
		if !higher {
			d = -d
		}
		if d >= 0 {
			return fmt.Sprintf("met with %.0f%% to spare", 100*d)
		}
		return fmt.Sprintf("missed by %.0f%%", -100*d)
	}
	for _, shape := range []string{"shared", "independent"} {
		if c := r.Cell("reserve", shape, 1); c != nil {
			target("reserve p50 at 1 client ("+shape+")", "<= 0.5 ms", c.Latency.P50, "ms", c.Latency.P50 <= 0.5, rel(c.Latency.P50, 0.5, false))
		}
	}
	for _, shape := range []string{"shared", "independent"} {
		if c := r.Cell("reserve", shape, 50); c != nil {
			target("reserves/s at 50 clients ("+shape+")", ">= 15,000/s", c.Throughput, "ops/s", c.Throughput >= 15000, rel(c.Throughput, 15000, true))
			if c200 := r.Cell("reserve", shape, 200); c200 != nil && c.Throughput > 0 {
				// "No collapse": 200 clients keep at least 80% of the
				// 50-client throughput.
				f := c200.Throughput / c.Throughput
				target("no collapse at 200 clients ("+shape+"): throughput vs 50 clients", ">= 0.80", round3(f), "fraction", f >= 0.8, rel(f, 0.8, true))
			}
		}
	}
	if ratio > 0 {
		target("service / raw-Redis ceiling (reserve, 50 clients vs 50 connections)", ">= 0.50", ratio, "fraction", ratio >= 0.5, rel(ratio, 0.5, true))
	}
	if r.Backlog != nil {
		target(fmt.Sprintf("drain %d expired reservations", r.Backlog.Reservations), "<= 15 s", r.Backlog.DrainS, "s", r.Backlog.DrainS <= 15 && r.Backlog.Mismatches == 0, rel(r.Backlog.DrainS, 15, false))
	}
	if c := r.Cell("ratelimit", "shared", 50); c != nil {
		target("rate-limit checks/s at 50 clients (shared key)", ">= 20,000/s", c.Throughput, "ops/s", c.Throughput >= 20000, rel(c.Throughput, 20000, true))
	}
	if c := r.Cell("ratelimit", "independent", 50); c != nil {
		target("rate-limit checks/s at 50 clients (key per client)", ">= 20,000/s", c.Throughput, "ops/s", c.Throughput >= 20000, rel(c.Throughput, 20000, true))
	}
	if p := r.Physical; p != nil && p.Ratio > 0 {
		target("raw reserve script / minimal 3-scope script (50 connections)", ">= 0.60", p.Ratio, "fraction", p.Ratio >= 0.6, rel(p.Ratio, 0.6, true))
	}
	if m := r.Memory; m != nil && m.Reservations > 0 {
		target("Redis memory per settled reservation", "<= 1,000 B", m.SettledBytes, "B", m.SettledBytes <= 1000, rel(m.SettledBytes, 1000, false))
		target("Redis memory per active reservation", "<= 800 B", m.ActiveBytes, "B", m.ActiveBytes <= 800, rel(m.ActiveBytes, 800, false))
	}
	target("ledger mismatches", "0", float64(r.Mismatches), "", r.Mismatches == 0, fmt.Sprintf("%d mismatches", r.Mismatches))
}

// writeReport prints the run as tables.
func writeReport(w io.Writer, r *bench.Result) {
	fmt.Fprintf(w, "cycles-bench %s  commit %s  %s (%d CPUs, GOMAXPROCS %d)  %s  redis %s\n\n",
		r.StartedAt, r.Commit, r.Machine.CPUModel, r.Machine.NumCPU, r.Machine.GOMAXPROCS, r.Machine.GoVersion, r.Machine.Redis)
	fmt.Fprintf(w, "%-10s %-12s %7s %10s %9s %9s %9s %9s %7s  %s\n", "op", "shape", "clients", "ops/s", "p50 ms", "p95 ms", "p99 ms", "max ms", "errors", "CPU ms per 1k ops (redis/server/client), redis µs/script, cmds/read")
	cells := append([]bench.Cell(nil), r.Cells...)
	order := map[string]int{}
	for i, o := range allOps {
		order[o] = i
	}
	sort.SliceStable(cells, func(i, j int) bool {
		if cells[i].Op != cells[j].Op {
			return order[cells[i].Op] < order[cells[j].Op]
		}
		if cells[i].Shape != cells[j].Shape {
			return cells[i].Shape > cells[j].Shape
		}
		return cells[i].Clients < cells[j].Clients
	})
	for _, c := range cells {
		cpu := ""
		if c.CPU != nil {
			cpu = fmt.Sprintf("%.0f / %.0f / %.0f, %.1f, %.2f", c.CPU.Redis, c.CPU.Server, c.CPU.Client, c.CPU.ScriptUsPerCall, c.CPU.CommandsPerRead)
		}
		fmt.Fprintf(w, "%-10s %-12s %7d %10.0f %9.3f %9.3f %9.3f %9.3f %7d  %s\n", c.Op, c.Shape, c.Clients, c.Throughput,
			c.Latency.P50, c.Latency.P95, c.Latency.P99, c.Latency.Max, c.Errors, cpu)
	}
	if c := r.Ceiling; c != nil {
		cpu := ""
		if c.CPU != nil {
			cpu = fmt.Sprintf("%.0f / - / %.0f, %.1f, %.2f", c.CPU.Redis, c.CPU.Client, c.CPU.ScriptUsPerCall, c.CPU.CommandsPerRead)
		}
		fmt.Fprintf(w, "%-10s %-12s %7d %10.0f %9.3f %9.3f %9.3f %9.3f %7d  %s\n", "ceiling", "shared", c.Conns, c.Throughput,
			c.Latency.P50, c.Latency.P95, c.Latency.P99, c.Latency.Max, c.Errors, cpu)
		if c.Single != nil {
			fmt.Fprintf(w, "%-10s %-12s %7d %10s %9.3f %9.3f %9.3f %9.3f\n", "ceiling", "shared", 1, "", c.Single.P50, c.Single.P95, c.Single.P99, c.Single.Max)
		}
	}
	if p := r.Physical; p != nil {
		cpu := ""
		if p.CPU != nil {
			cpu = fmt.Sprintf("%.0f / - / %.0f, %.1f, %.2f", p.CPU.Redis, p.CPU.Client, p.CPU.ScriptUsPerCall, p.CPU.CommandsPerRead)
		}
		fmt.Fprintf(w, "%-10s %-12s %7d %10.0f %9.3f %9.3f %9.3f %9.3f %7d  %s\n", "physical", "minimal", p.Conns, p.Throughput,
			p.Latency.P50, p.Latency.P95, p.Latency.P99, p.Latency.Max, p.Errors, cpu)
		fmt.Fprintf(w, "ceiling / physical limit: %.3f\n", p.Ratio)
	}
	if m := r.Memory; m != nil {
		fmt.Fprintf(w, "\nmemory: %d reservations: %.0f B each while active, %.0f B each settled (%.0f GB per 1M settled/day over 30 days); one record %d B %s active, %d B %s settled\n",
			m.Reservations, m.ActiveBytes, m.SettledBytes, m.SettledBytes*30e6/1e9, m.RecordActiveBytes, m.RecordActiveEncoding, m.RecordSettledBytes, m.RecordSettledEncoding)
		fmt.Fprintf(w, "        of which: one reserve idempotency record %d B; index entries %.0f B per active, %.0f B per settled reservation\n",
			m.IdempotencyBytes, m.IndexActiveBytes, m.IndexSettledBytes)
		if m.Errors > 0 {
			fmt.Fprintf(w, "memory cell errors: %d %v\n", m.Errors, m.ErrorCodes)
		}
	}
	if b := r.Backlog; b != nil {
		fmt.Fprintf(w, "\nbacklog: %d reservations over %d tenants seeded in %.1f s; one sweep expired %d in %.2f s (%.0f/s); %d mismatches\n",
			b.Reservations, b.Tenants, b.SeedS, b.Expired, b.DrainS, b.Rate, b.Mismatches)
		if b.ScriptCalls > 0 {
			fmt.Fprintf(w, "  %d expiry script calls (%.1f expired per call); longest held Redis %.2f ms, median %.2f ms (SLOWLOG)\n",
				b.ScriptCalls, b.PerScriptCall, b.ScriptMaxMs, b.ScriptP50Ms)
		}
	}
	budgets := 0
	for _, l := range r.Ledger {
		budgets += l.Budgets
	}
	fmt.Fprintf(w, "ledger: %d budgets checked in %d groups, %d mismatches; %d request errors\n", budgets, len(r.Ledger), r.Mismatches, r.Errors)
	fmt.Fprintf(w, "\ntargets:\n")
	for _, t := range r.Targets {
		mark := "MET   "
		if !t.Met {
			mark = "MISSED"
		}
		fmt.Fprintf(w, "  %s %-70s want %-12s got %-10s %s\n", mark, t.Name, t.Want, fmtFloat(t.Value), t.Margin)
	}
	for _, f := range r.Failed {
		fmt.Fprintf(w, "FAILED: %s\n", f)
	}
}

func fmtFloat(v float64) string {
	if v >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.3f", v)
}
