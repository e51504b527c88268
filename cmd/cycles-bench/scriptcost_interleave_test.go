package main

import (
	"bytes"
	"context"
	"math"
	"math/rand"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cyclesgo/cycles-go/bench"
)

func interleaveRedis(t *testing.T) *redis.Client {
	t.Helper()
	rs, addr, err := startRedis(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.stop(5 * time.Second) })
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// A cell whose script does far more work must come out slower, call by
// call: the attribution follows the calls, whichever order the round runs
// them in. The fast cell sends 40 arguments, one of 200 bytes, so its
// SLOWLOG entries are truncated and checked against what was sent.
func TestInterleaveAttributesEachCallToItsCell(t *testing.T) {
	ctx := context.Background()
	c := interleaveRedis(t)
	fastArgs := []any{strings.Repeat("x", 200)}
	for i := 0; i < 39; i++ {
		fastArgs = append(fastArgs, i)
	}
	calls := []func(int) error{
		func(i int) error {
			return c.Eval(ctx, "return 1", []string{"fast:" + strconv.Itoa(i)}, fastArgs...).Err()
		},
		func(i int) error {
			return c.Eval(ctx, "local s = 0 for j = 1, tonumber(ARGV[1]) do s = s + j end return s", []string{"slow"}, 300000).Err()
		},
	}
	m, err := measureInterleaved(ctx, c, []string{"fast", "slow"}, calls, interleaveOptions{rounds: 30, warmup: 3, batch: 7, block: 3})
	if err != nil {
		t.Fatal(err)
	}
	for k, name := range []string{"fast", "slow"} {
		// 30 rounds of blocks of 3 calls, the first of each not kept
		if len(m.redisUS[k]) != 60 || len(m.cpuUS[k]) != 60 {
			t.Fatalf("%s: %d Redis figures, %d CPU figures; want 60", name, len(m.redisUS[k]), len(m.cpuUS[k]))
		}
	}
	if f, s := bench.MedianOf(m.redisUS[0]), bench.MedianOf(m.redisUS[1]); !(s > 20*f) {
		t.Errorf("median µs: fast %.0f, slow %.0f; the slow cell must be far slower", f, s)
	}
	if m.statCalls != 180 {
		t.Errorf("commandstats counted %d script calls in the measured rounds, want 180", m.statCalls)
	}
	if m.slowCalls != m.statCalls || int64(m.slowUS) != m.statUS {
		t.Errorf("SLOWLOG: %d calls, %.0f µs; commandstats %d calls, %d µs: not the same quantity", m.slowCalls, m.slowUS, m.statCalls, m.statUS)
	}
}

// A call that sends two script commands cannot be attributed one to one:
// the run fails.
func TestInterleaveFailsWhenACallSendsTwoScripts(t *testing.T) {
	ctx := context.Background()
	c := interleaveRedis(t)
	calls := []func(int) error{
		func(int) error { return c.Eval(ctx, "return 1", nil).Err() },
		func(int) error {
			if err := c.Eval(ctx, "return 2", nil).Err(); err != nil {
				return err
			}
			return c.Eval(ctx, "return 3", nil).Err()
		},
	}
	_, err := measureInterleaved(ctx, c, []string{"one", "two"}, calls, interleaveOptions{rounds: 4, batch: 2})
	if err == nil || !strings.Contains(err.Error(), "4 script calls of two, 2 calls were made") {
		t.Fatalf("err = %v; want the count of two's calls named", err)
	}
}

func TestAttributeSlowlog(t *testing.T) {
	sent := []sentCall{{0, []string{"fcall", "a", "1", "k"}}, {1, []string{"fcall", "b", "1", "k"}}, {0, []string{"fcall", "a", "1", "k2"}}}
	entries := []slowEntry{
		{1, 3, []string{"hget", "k", "f"}}, // a command inside the script
		{2, 50, []string{"fcall", "a", "1", "k"}},
		{3, 70, []string{"fcall", "b", "1", "k"}},
		{4, 55, []string{"fcall", "a", "1", "k2"}},
		{5, 4, []string{"slowlog", "get", "-1"}},
	}
	per, inner, err := attributeSlowlog(entries, sent, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(per[0], []float64{50, 55}) || !slices.Equal(per[1], []float64{70}) || !slices.Equal(inner, []int{1, 0}) {
		t.Errorf("per = %v, inner = %v", per, inner)
	}
	swapped := slices.Clone(entries)
	swapped[1], swapped[2] = swapped[2], swapped[1]
	if _, _, err := attributeSlowlog(swapped, sent, 2); err == nil {
		t.Error("entries out of the order sent: attributed")
	}
	if _, _, err := attributeSlowlog(entries[:3], sent, 2); err == nil {
		t.Error("an entry missing: attributed")
	}
}

func TestSlowlogArgs(t *testing.T) {
	long := strings.Repeat("y", 130)
	if got := slowlogArgs([]string{"eval", long}); got[1] != strings.Repeat("y", 128)+"... (2 more bytes)" {
		t.Errorf("long arg: %q", got[1])
	}
	var many []string
	for i := 0; i < 40; i++ {
		many = append(many, strconv.Itoa(i))
	}
	got := slowlogArgs(many)
	if len(got) != 32 || got[30] != "30" || got[31] != "... (9 more arguments)" {
		t.Errorf("40 args: %d kept, last %q", len(got), got[len(got)-1])
	}
	if got := slowlogArgs(many[:32]); !slices.Equal(got, many[:32]) {
		t.Errorf("32 args: %q", got)
	}
}

func TestRoundOrderAlternates(t *testing.T) {
	got := append(roundOrder(0, 4, false), roundOrder(1, 4, false)...)
	if !slices.Equal(got, []int{0, 1, 2, 3, 3, 2, 1, 0}) {
		t.Errorf("order %v", got)
	}
	// Shuffled: every round a permutation, the same for the same round.
	for r := 0; r < 20; r++ {
		p := roundOrder(r, 5, true)
		if q := slices.Sorted(slices.Values(p)); !slices.Equal(q, []int{0, 1, 2, 3, 4}) || !slices.Equal(roundOrder(r, 5, true), p) {
			t.Errorf("round %d: %v", r, p)
		}
	}
}

func TestCostPairs(t *testing.T) {
	ops := []string{"reserve", "reserve-gov5", "reserve-spread", "reserve-gov5-spread", "reserve-pol10-read-spread", "commit", "reserve-gov5"}
	got, err := costPairs("", ops)
	if err != nil || !slices.Equal(got, [][2]int{{1, 0}, {3, 2}, {4, 2}}) {
		t.Errorf("default pairs %v, %v", got, err)
	}
	if got, err := costPairs("commit/reserve", ops); err != nil || !slices.Equal(got, [][2]int{{5, 0}}) {
		t.Errorf("named pair %v, %v", got, err)
	}
	for _, bad := range []string{"commit", "x/reserve", "reserve/reserve"} {
		if _, err := costPairs(bad, ops); err == nil {
			t.Errorf("-pairs %q accepted", bad)
		}
	}
}

func TestSharedTenants(t *testing.T) {
	got := sharedTenants([]string{"reserve", "reserve-gov5", "reserve-spread", "reserve-gov5-spread", "reserve-twin", "reserve"})
	if !slices.Equal(got, []string{"reserve and reserve-spread", "reserve-gov5 and reserve-gov5-spread"}) {
		t.Errorf("shared %q", got)
	}
	if got := sharedTenants([]string{"reserve", "reserve-gov5", "reserve-twin"}); len(got) != 0 {
		t.Errorf("shared %q", got)
	}
}

func TestCostStatistics(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3, 100, 3, 2, 4, 1}
	if m := mean(xs); m != 12.5 {
		t.Errorf("mean %v", m)
	}
	// 10 % of 10 values: the 1 lowest and the 1 highest (100) cut.
	if m := trimmedMean(xs, 0.1); m != 3 {
		t.Errorf("trimmed mean %v", m)
	}
	if r := pairRatios([]float64{2, 3, 9}, []float64{1, 0, 3}); !slices.Equal(r, []float64{2, 3}) {
		t.Errorf("ratios %v", r)
	}
	var seq []float64
	for i := 1; i <= 100; i++ {
		seq = append(seq, float64(i))
	}
	// n = 100: ranks 50 ∓ 9.8, i.e. 0-based 40 and 60 (the values 41 and 61).
	if m, lo, hi := medianCI(seq); m != 50.5 || lo != 41 || hi != 61 {
		t.Errorf("median CI %v [%v, %v]", m, lo, hi)
	}
	// Every pair in the ratio 1.15: every resample gives 1.15.
	a, b := make([]float64, 50), make([]float64, 50)
	for i := range a {
		b[i] = float64(40 + i%7)
		a[i] = 1.15 * b[i]
	}
	lo, hi := bootstrapRatio(a, b, mean, 200, rand.New(rand.NewSource(1)))
	if math.Abs(lo-1.15) > 1e-9 || math.Abs(hi-1.15) > 1e-9 {
		t.Errorf("bootstrap of a constant ratio [%v, %v]", lo, hi)
	}
	var out bytes.Buffer
	writeInterleaveReport(&out, []string{"a", "b"}, [][2]int{{0, 1}}, [][]float64{a, b}, [][]float64{a, b}, 100)
	if !strings.Contains(out.String(), "| `a` / `b` | +15.0 % [+15.0, +15.0] |") {
		t.Errorf("report:\n%s", out.String())
	}
}
