package main

import (
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"testing"

	"github.com/cyclesgo/cycles-go/bench"
)

// fullRun is a result with every cell, section and figure a default run
// (parseRunFlags with no flags) measures.
func fullRun(t *testing.T) *bench.Result {
	t.Helper()
	cfg, err := parseRunFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	r := &bench.Result{Version: bench.ResultVersion}
	for _, c := range cfg.clients {
		for _, s := range cfg.shapes {
			for _, op := range cfg.ops {
				r.Cells = append(r.Cells, bench.Cell{Op: op, Shape: s, Clients: c, Window: bench.Window{Ops: 10, Throughput: 100, Latency: bench.Latency{P50: 1}}})
			}
		}
	}
	r.Ceiling = &bench.Ceiling{Window: bench.Window{Throughput: 200}}
	r.Physical = &bench.Physical{Window: bench.Window{Throughput: 400}}
	r.Memory = &bench.Memory{Reservations: 10, ActiveBytes: 1, SettledBytes: 1}
	r.Backlog = &bench.Backlog{Reservations: 10, DrainS: 1}
	finish(r)
	return r
}

func names(hs []bench.Headline) []string {
	var out []string
	for _, h := range hs {
		out = append(out, h.Name)
	}
	slices.Sort(out)
	return out
}

// TestBaselineMatchesTheResultFormat: bench/baseline.json, the file make
// bench-check compares with, is in today's result format (no field the code
// no longer writes, today's version) and gates exactly the headline figures
// a default run produces: a figure renamed or dropped in code would fail
// every check as MISSING, a new one would go ungated.
func TestBaselineMatchesTheResultFormat(t *testing.T) {
	raw, err := os.ReadFile("../../bench/baseline.json")
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var base bench.Result
	if err := dec.Decode(&base); err != nil {
		t.Fatalf("bench/baseline.json does not decode strictly as bench.Result: %v", err)
	}
	if base.Version != bench.ResultVersion {
		t.Fatalf("baseline version %d, results are %d", base.Version, bench.ResultVersion)
	}
	if len(base.Failed) > 0 {
		t.Fatalf("baseline carries failures: %v", base.Failed)
	}
	got, want := names(base.Headline), names(fullRun(t).Headline)
	if !slices.Equal(got, want) {
		t.Fatalf("baseline headline figures %v,\na default run's %v", got, want)
	}
}

// TestDriftNamesWhatTheBaselineWasTakenWith: a run with another GOGC, other
// cyclesd flags or another shape is reported; listen addresses are not.
func TestDriftNamesWhatTheBaselineWasTakenWith(t *testing.T) {
	base := fullRun(t)
	base.Config = bench.Config{Clients: []int{1, 50}, ServerGOGC: "400",
		ServerArgs: []string{"-listen", "127.0.0.1:1", "-http-listen=127.0.0.1:2", "-redis-addrs", "127.0.0.1:3", "-sweeper-interval", "1h"}}
	same := *base
	same.Config.ServerArgs = []string{"-listen", "127.0.0.1:9", "-http-listen=127.0.0.1:8", "-redis-addrs", "127.0.0.1:7", "-sweeper-interval", "1h"}
	if d := bench.Drift(base, &same); len(d) != 0 {
		t.Fatalf("drift between runs differing only in addresses: %v", d)
	}
	cases := []struct {
		name   string
		change func(c *bench.Config)
	}{
		{"cyclesd GOGC", func(c *bench.Config) { c.ServerGOGC = "100" }},
		{"cyclesd flags", func(c *bench.Config) { c.ServerArgs = append(c.ServerArgs, "-guard-policy=") }},
		{"clients", func(c *bench.Config) { c.Clients = []int{50} }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cur := *base
			cur.Config.ServerArgs = slices.Clone(base.Config.ServerArgs)
			tc.change(&cur.Config)
			d := bench.Drift(base, &cur)
			if len(d) != 1 || !bytes.HasPrefix([]byte(d[0]), []byte(tc.name+":")) {
				t.Fatalf("drift = %v, want one line about %s", d, tc.name)
			}
		})
	}
}
