package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runTool runs a subcommand's main quietly with args (given at most four
// minutes) and reads the result it wrote to its -out file.
func runTool[R any](t *testing.T, main func(context.Context, []string) error, args ...string) R {
	t.Helper()
	out := filepath.Join(t.TempDir(), "result.json")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if err := main(ctx, append(args, "-out", out, "-q")); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var res R
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	return res
}

// The archive bench with settles made in process (-load ledger): every
// settle of the drain is archived exactly once from several tenants' queues,
// the lag phase samples the queues of all of them, and every tenant's ledger
// checks out through cyclesd's AdminService. (No figure is asserted: the
// rates belong to make bench-archive-lag.)
func TestArchiveInProcessLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server, PostgreSQL and cyclesd")
	}
	res := runTool[ArchiveResult](t, archiveMain, "-cyclesd", buildCyclesd(t), "-load", "ledger", "-tenants", "3", "-workers", "6",
		"-phases", "drain,lag", "-drain", "240", "-lag-rate", "60", "-lag-for", "3s")
	if !strings.HasPrefix(res.Load, "ledger: settles produced in-process by the ledger scripts") || res.Tenants != 3 {
		t.Errorf("load %q over %d tenants", res.Load, res.Tenants)
	}
	if res.DrainBacklog != 240 || res.ArchivedRows != 240 || res.ArchivedDupes != 0 {
		t.Errorf("drain: %d settled, %d archived, %d duplicates; want 240, 240, 0", res.DrainBacklog, res.ArchivedRows, res.ArchivedDupes)
	}
	if res.LagSamples == 0 || res.LagMeasure == "" || res.LagErrors != 0 {
		t.Errorf("lag: %d samples, %d errors, measure %q", res.LagSamples, res.LagErrors, res.LagMeasure)
	}
	// Two phases × three tenants, each with its three shared budgets.
	if len(res.Ledger) != 6 {
		t.Fatalf("ledger checks: %+v", res.Ledger)
	}
	for _, l := range res.Ledger {
		if l.Budgets != 3 || l.Mismatches != 0 {
			t.Errorf("ledger %s: %d budgets, %d mismatches %v", l.Group, l.Budgets, l.Mismatches, l.Details)
		}
	}
}

// Bad flags of the archive and gogc subcommands are refused before any
// process starts.
func TestToolFlagValidation(t *testing.T) {
	cases := []struct {
		name string
		main func(context.Context, []string) error
		args []string
		want string
	}{
		{"archive load", archiveMain, []string{"-load", "http"}, "-load"},
		{"archive no tenants", archiveMain, []string{"-load", "ledger", "-tenants", "0"}, "-tenants"},
		{"archive tenants above workers", archiveMain, []string{"-load", "ledger", "-tenants", "9", "-workers", "8"}, "-tenants"},
		{"gogc one value", gogcMain, []string{"-values", "100"}, "two -values"},
		{"gogc bad value", gogcMain, []string{"-values", "100,lots"}, "-values"},
		{"gogc shape", gogcMain, []string{"-shape", "round"}, "-shape"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.main(context.Background(), tc.args)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one naming %s", err, tc.want)
			}
		})
	}
}

// gogc at a tiny scale: each round runs every value once on its own cyclesd
// (checked to run with that GOGC), alternating the order, and the medians
// are per value.
func TestGOGCInterleavesValues(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server and cyclesd")
	}
	res := runTool[GOGCResult](t, gogcMain, "-cyclesd", buildCyclesd(t), "-values", "100,400", "-rounds", "2", "-clients", "3",
		"-duration", "300ms", "-warmup", "50ms")
	var order []string
	for _, p := range res.Passes {
		order = append(order, p.GOGC)
		if p.Throughput <= 0 || p.Errors != 0 {
			t.Errorf("pass %+v", p)
		}
	}
	if strings.Join(order, ",") != "100,400,400,100" {
		t.Errorf("passes ran in order %v, want 100,400,400,100", order)
	}
	if len(res.Values) != 2 || res.Values[0].GOGC != "100" || res.Values[1].GOGC != "400" {
		t.Errorf("medians %+v", res.Values)
	}
}

func TestGOGCMedians(t *testing.T) {
	passes := []GOGCPass{
		{GOGC: "100", ServerMsPerKop: 10, Throughput: 1}, {GOGC: "400", ServerMsPerKop: 8, Throughput: 2},
		{GOGC: "400", ServerMsPerKop: 6, Throughput: 4}, {GOGC: "100", ServerMsPerKop: 30, Throughput: 3},
		{GOGC: "100", ServerMsPerKop: 20, Throughput: 2, Errors: 1},
	}
	got := gogcMedians([]string{"100", "400"}, passes)
	want := []GOGCPass{{GOGC: "100", ServerMsPerKop: 20, Throughput: 2, Errors: 1}, {GOGC: "400", ServerMsPerKop: 7, Throughput: 3}}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("value %s: %+v, want %+v", want[i].GOGC, got[i], want[i])
		}
	}
}
