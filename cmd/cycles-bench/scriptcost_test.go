package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// The cost tool runs every operation through the domain packages against a
// real redis-server (here without valgrind: Redis's own time per call).
func TestScriptCostRunsEveryOperation(t *testing.T) {
	if err := scriptcostMain(context.Background(), []string{"-valgrind=false", "-n", "20",
		"-ops", "reserve,commit,release,physical,reserve-pol10,reserve-pol10-read,reserve-gov5,reserve-gov5,reserve-rl,reserve-rl,reserve-spread,reserve-gov5-spread,reserve-gov5-spread,reserve-pol10-read-spread"}); err != nil {
		t.Fatal(err)
	}
}

// The interleaved mode sets every cell up on one redis-server and
// attributes every call (it fails when it cannot).
func TestScriptCostInterleaves(t *testing.T) {
	if err := scriptcostMain(context.Background(), []string{"-interleave", "-n", "30", "-warmup", "5",
		"-ops", "reserve,reserve-gov5,reserve-spread,reserve-gov5-spread"}); err != nil {
		t.Fatal(err)
	}
}

func TestCallgrindTotal(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct {
		body string
		want int64
		ok   bool
	}{
		"summary":  {"version: 1\ncreator: callgrind-3.19.0\nevents: Ir\nsummary: 242718829\nfn=main\n", 242718829, true},
		"totals":   {"events: Ir\nfn=x\n0 5\ntotals: 77\n", 77, true},
		"no total": {"events: Ir\nfn=x\n0 5\n", 0, false},
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(tc.body), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := callgrindTotal(p)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("%s: got %d, %v; want %d, ok=%v", name, got, err, tc.want, tc.ok)
		}
	}
}
