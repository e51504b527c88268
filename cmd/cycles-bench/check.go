package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/cyclesgo/cycles-go/bench"
)

// checkMain: cycles-bench check -baseline bench/baseline.json run1.json run2.json run3.json
// Takes the per-figure medians of the runs and fails (exit 1) if any
// headline figure is worse than the baseline by more than -max-regression,
// if a baseline figure is missing, or if any run failed by itself (ledger
// mismatch, errors).
func checkMain(args []string) error {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	baseline := fs.String("baseline", "bench/baseline.json", "baseline result")
	maxReg := fs.Float64("max-regression", bench.DefaultMaxRegression, "largest tolerated regression (fraction)")
	medianOut := fs.String("median-out", "", "also write the median result here")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("check: no result files given")
	}
	base, err := bench.Load(*baseline)
	if err != nil {
		return err
	}
	med, err := loadMedian(fs.Args())
	if err != nil {
		return err
	}
	if *medianOut != "" {
		if err := med.Save(*medianOut); err != nil {
			return err
		}
	}
	cmp, ok := bench.Compare(base, med, *maxReg)
	fmt.Printf("bench-check: median of %d runs vs %s (baseline commit %s, %s)\n\n", fs.NArg(), *baseline, base.Commit, base.StartedAt)
	bench.WriteComparison(os.Stdout, cmp, med.Failed, *maxReg)
	if drift := bench.Drift(base, med); len(drift) > 0 {
		// Not a failure: the figures decide. But a regression (or a pass)
		// against a baseline taken another way means little.
		fmt.Printf("\nthe baseline was taken differently from these runs (refresh it: cycles-bench median -o %s <three runs>):\n", *baseline)
		for _, d := range drift {
			fmt.Println("  " + d)
		}
	}
	if !ok {
		return fmt.Errorf("bench-check failed: a headline figure regressed more than %.0f%% or a run failed", 100**maxReg)
	}
	fmt.Println("\nbench-check passed")
	return nil
}

// medianMain: cycles-bench median -o bench/baseline.json run1.json run2.json run3.json
func medianMain(args []string) error {
	fs := flag.NewFlagSet("median", flag.ContinueOnError)
	out := fs.String("o", "", "output file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || fs.NArg() == 0 {
		return fmt.Errorf("median: need -o and result files")
	}
	med, err := loadMedian(fs.Args())
	if err != nil {
		return err
	}
	if len(med.Failed) > 0 {
		return fmt.Errorf("median: refusing to write a baseline from failed runs: %v", med.Failed)
	}
	return med.Save(*out)
}

func loadMedian(files []string) (*bench.Result, error) {
	var runs []*bench.Result
	for _, f := range files {
		r, err := bench.Load(f)
		if err != nil {
			return nil, err
		}
		runs = append(runs, r)
	}
	return bench.Median(runs, files)
}
