package bench

import (
	"bytes"
	"math"
	"path/filepath"
	"strings"
	"testing"
)

func run(tput, p50 float64) *Result {
	return &Result{Version: ResultVersion, Headline: []Headline{
		{Name: "reserve_tput", Value: tput, Unit: "ops/s", Better: Higher},
		{Name: "reserve_p50", Value: p50, Unit: "ms", Better: Lower},
	}}
}

func TestMedianTakesEachFigureIndependently(t *testing.T) {
	m, err := Median([]*Result{run(100, 0.9), run(300, 0.1), run(200, 0.5)}, []string{"a", "b", "c"})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]float64{"reserve_tput": 200, "reserve_p50": 0.5} {
		h, ok := m.HeadlineValue(name)
		if !ok || h.Value != want {
			t.Errorf("%s = %v, want %v", name, h.Value, want)
		}
	}
	// Even count: mean of the middle two.
	m, _ = Median([]*Result{run(100, 1), run(200, 2)}, nil)
	if h, _ := m.HeadlineValue("reserve_tput"); h.Value != 150 {
		t.Errorf("even median = %v", h.Value)
	}
}

func TestMedianCarriesFailures(t *testing.T) {
	bad := run(200, 0.5)
	bad.Failed = []string{"ledger mismatch in g: x"}
	m, _ := Median([]*Result{run(200, 0.5), bad, run(200, 0.5)}, []string{"r1", "r2", "r3"})
	if len(m.Failed) != 1 || !strings.HasPrefix(m.Failed[0], "r2: ") {
		t.Fatalf("failed = %v", m.Failed)
	}
	if _, ok := Compare(run(200, 0.5), m, DefaultMaxRegression); ok {
		t.Fatal("a failed run must fail the gate even with good figures")
	}
}

func TestCompareGatesAt25PercentInEachDirection(t *testing.T) {
	base := run(1000, 0.40)
	cases := []struct {
		name      string
		cur       *Result
		ok        bool
		regressed []string
	}{
		{"equal", run(1000, 0.40), true, nil},
		{"throughput 24% lower", run(760, 0.40), true, nil},
		{"throughput 26% lower", run(740, 0.40), false, []string{"reserve_tput"}},
		{"throughput much higher", run(5000, 0.40), true, nil},
		{"latency 24% higher", run(1000, 0.496), true, nil},
		{"latency 26% higher", run(1000, 0.504), false, []string{"reserve_p50"}},
		{"latency lower", run(1000, 0.1), true, nil},
		{"both worse", run(100, 4), false, []string{"reserve_tput", "reserve_p50"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cmp, ok := Compare(base, tc.cur, DefaultMaxRegression)
			if ok != tc.ok {
				t.Fatalf("ok = %v, want %v (%+v)", ok, tc.ok, cmp)
			}
			var got []string
			for _, c := range cmp {
				if c.Regressed {
					got = append(got, c.Name)
				}
			}
			if strings.Join(got, ",") != strings.Join(tc.regressed, ",") {
				t.Fatalf("regressed = %v, want %v", got, tc.regressed)
			}
		})
	}
}

func TestCompareFailsOnAMissingFigureAndIgnoresNewOnes(t *testing.T) {
	base := run(1000, 0.4)
	cur := &Result{Headline: []Headline{{Name: "reserve_tput", Value: 1000, Better: Higher}, {Name: "new_figure", Value: 1, Better: Higher}}}
	cmp, ok := Compare(base, cur, DefaultMaxRegression)
	if ok {
		t.Fatal("a baseline figure missing from the run must fail")
	}
	var missing, added bool
	for _, c := range cmp {
		missing = missing || (c.Name == "reserve_p50" && c.Missing)
		added = added || (c.Name == "new_figure" && c.New && !c.Regressed)
	}
	if !missing || !added {
		t.Fatalf("comparisons = %+v", cmp)
	}
}

func TestWorseByZeroBaseline(t *testing.T) {
	if w := worseBy(Lower, 0, 0); w != 0 {
		t.Fatal(w)
	}
	if w := worseBy(Lower, 0, 1); !math.IsInf(w, 1) {
		t.Fatal(w)
	}
	if w := worseBy(Higher, 0, 1); !math.IsInf(w, -1) {
		t.Fatal(w)
	}
}

func TestSaveLoadRoundTripAndReport(t *testing.T) {
	p := filepath.Join(t.TempDir(), "r.json")
	r := run(1234, 0.321)
	r.Cells = []Cell{{Op: "reserve", Shape: "shared", Clients: 50, Window: Window{Throughput: 1234}}}
	if err := r.Save(p); err != nil {
		t.Fatal(err)
	}
	got, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if c := got.Cell("reserve", "shared", 50); c == nil || c.Throughput != 1234 {
		t.Fatalf("cell = %+v", c)
	}
	cmp, _ := Compare(r, got, DefaultMaxRegression)
	var buf bytes.Buffer
	WriteComparison(&buf, cmp, nil, DefaultMaxRegression)
	if !strings.Contains(buf.String(), "reserve_tput (ops/s)") || !strings.Contains(buf.String(), "1234") {
		t.Fatalf("report:\n%s", buf.String())
	}
	bad := filepath.Join(t.TempDir(), "old.json")
	old := run(1, 1)
	old.Version = 0
	_ = old.Save(bad)
	if _, err := Load(bad); err == nil {
		t.Fatal("an old result version must be refused")
	}
}
