package bench

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
)

// DefaultMaxRegression is the gate of `make bench-check`: a headline figure
// more than 25% worse than the baseline fails.
const DefaultMaxRegression = 0.25

// Median combines several runs into one result whose headline figures are
// the per-figure medians (each figure's median is taken independently, so
// one noisy run cannot fail or pass the gate alone). The other sections are
// those of the run whose reserve throughput is the median one, so the
// result stays a real, self-consistent run for the reader.
func Median(runs []*Result, names []string) (*Result, error) {
	if len(runs) == 0 {
		return nil, fmt.Errorf("no runs")
	}
	values := map[string][]float64{}
	meta := map[string]Headline{}
	var order []string
	for _, r := range runs {
		for _, h := range r.Headline {
			if _, seen := meta[h.Name]; !seen {
				order = append(order, h.Name)
				meta[h.Name] = h
			}
			values[h.Name] = append(values[h.Name], h.Value)
		}
	}
	// The representative run: median by its first headline figure.
	rep := runs[0]
	if len(order) > 0 {
		idx := make([]int, len(runs))
		for i := range idx {
			idx[i] = i
		}
		first := order[0]
		val := func(i int) float64 {
			h, _ := runs[i].HeadlineValue(first)
			return h.Value
		}
		sort.Slice(idx, func(a, b int) bool { return val(idx[a]) < val(idx[b]) })
		rep = runs[idx[len(idx)/2]]
	}
	out := *rep
	out.Headline = nil
	for _, n := range order {
		h := meta[n]
		h.Value = MedianOf(values[n])
		out.Headline = append(out.Headline, h)
	}
	out.Runs = names
	out.Failed = nil
	for i, r := range runs {
		for _, f := range r.Failed {
			label := fmt.Sprintf("run %d", i+1)
			if i < len(names) {
				label = names[i]
			}
			out.Failed = append(out.Failed, label+": "+f)
		}
	}
	return &out, nil
}

// Comparison is one headline figure against the baseline.
type Comparison struct {
	Name     string
	Unit     string
	Better   Better
	Baseline float64
	Current  float64
	// Change is the relative change in the "worse" direction: +0.30 means
	// 30% worse than the baseline, negative means better.
	Worse     float64
	Regressed bool
	Missing   bool // in the baseline but not in the current run
	New       bool // in the current run but not in the baseline
}

// Compare checks current against baseline: a figure regresses when it is
// worse than the baseline by more than maxRegression (a fraction). A figure
// the baseline has and the current run lacks is a failure too (a shape
// silently dropped from the run must not pass the gate).
func Compare(baseline, current *Result, maxRegression float64) (cmp []Comparison, ok bool) {
	ok = true
	cur := map[string]Headline{}
	for _, h := range current.Headline {
		cur[h.Name] = h
	}
	seen := map[string]bool{}
	for _, b := range baseline.Headline {
		seen[b.Name] = true
		c := Comparison{Name: b.Name, Unit: b.Unit, Better: b.Better, Baseline: b.Value}
		h, found := cur[b.Name]
		if !found {
			c.Missing, c.Regressed = true, true
			ok = false
			cmp = append(cmp, c)
			continue
		}
		c.Current = h.Value
		c.Worse = worseBy(b.Better, b.Value, h.Value)
		if c.Worse > maxRegression {
			c.Regressed = true
			ok = false
		}
		cmp = append(cmp, c)
	}
	for _, h := range current.Headline {
		if !seen[h.Name] {
			cmp = append(cmp, Comparison{Name: h.Name, Unit: h.Unit, Better: h.Better, Current: h.Value, New: true})
		}
	}
	if len(current.Failed) > 0 {
		ok = false
	}
	return cmp, ok
}

// worseBy is how much worse cur is than base, as a fraction of base
// (negative: better). A zero baseline compares absolutely.
func worseBy(better Better, base, cur float64) float64 {
	if math.IsNaN(cur) {
		return math.Inf(1)
	}
	d := cur - base
	if better == Higher {
		d = base - cur
	}
	if base == 0 {
		switch {
		case d > 0:
			return math.Inf(1)
		case d < 0:
			return math.Inf(-1)
		}
		return 0
	}
	return d / math.Abs(base)
}

// WriteComparison prints the gate's table.
func WriteComparison(w io.Writer, cmp []Comparison, failed []string, maxRegression float64) {
	fmt.Fprintf(w, "%-42s %10s %10s %9s  %s\n", "headline figure", "baseline", "median", "change", "verdict")
	for _, c := range cmp {
		verdict := "ok"
		change := ""
		switch {
		case c.Missing:
			verdict = "MISSING (in baseline, not in this run)"
		case c.New:
			verdict = "new (not gated)"
		default:
			// Print the signed change of the raw value, and the verdict in
			// the figure's own direction.
			if c.Baseline != 0 {
				change = fmt.Sprintf("%+.1f%%", 100*(c.Current-c.Baseline)/c.Baseline)
			}
			if c.Regressed {
				verdict = fmt.Sprintf("REGRESSION (%.0f%% worse, limit %.0f%%)", 100*c.Worse, 100*maxRegression)
			} else if c.Worse < -maxRegression {
				verdict = "better (consider updating the baseline)"
			}
		}
		fmt.Fprintf(w, "%-42s %10s %10s %9s  %s\n", c.Name+" ("+c.Unit+")", fmtVal(c.Baseline, c.New), fmtVal(c.Current, c.Missing), change, verdict)
	}
	for _, f := range failed {
		fmt.Fprintf(w, "FAILED RUN: %s\n", f)
	}
}

func fmtVal(v float64, absent bool) string {
	if absent {
		return "-"
	}
	if math.Abs(v) >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	s := fmt.Sprintf("%.3f", v)
	return strings.TrimRight(strings.TrimRight(s, "0"), ".")
}
