package main

import (
	"context"
	"encoding"
	"fmt"
	"io"
	"math"
	"math/rand"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cyclesgo/cycles-go/bench"
)

// The interleaved wall clock (scriptcost -interleave; BENCHMARKS.md, "Paired,
// interleaved calls"). A cell measured for seconds at a time takes the
// machine's speed during those seconds with it: on a shared box the plain
// reserve alone moved from 61 to 112 µs per call between passes. Here every
// op is called once per round, in turn, on one connection to one
// redis-server, so the calls compared are microseconds apart and drift moves
// both alike. Redis's time for each call comes from SLOWLOG with
// slowlog-log-slower-than 0: the microseconds Redis measures around the
// command, the quantity INFO commandstats sums (the run prints both sums).

type interleaveOptions struct {
	rounds, warmup int
	pairs          string
	batch          int // rounds between two SLOWLOG reads; 0: derived from slowlogLen
	// block is the calls of one op in a row per round; past one, the
	// first of each block (the one after another op's call) is not kept.
	block int
	// shuffle draws each round's order instead of A B, B A.
	shuffle bool
	// slowerThan is slowlog-log-slower-than in µs. Redis 7.0 logs the
	// commands a script runs too, inside the script's time; a threshold
	// above their few µs and under any script call's keeps them (and the
	// cost of logging them) out, and a script call under it fails the run
	// (counted against the calls made). 0 logs every command.
	slowerThan int
	resamples  int    // bootstrap resamples; 0: 1000
	raw        string // a CSV file for every measured call, or ""
}

// slowlogLen is the slowlog-max-len the run sets; a batch's entries stay
// well under it, and a read that fills it fails (entries may be lost).
const slowlogLen = 8192

// interleaveCells sets up every op (cell builds it and returns its call),
// runs o.warmup unmeasured then o.rounds measured rounds, and prints per op
// and per pair the figures to w as Markdown tables.
func interleaveCells(ctx context.Context, client *redis.Client, how string, ops []string,
	cell func(op string) (func(i int) error, error), o interleaveOptions, w io.Writer) error {
	pairs, err := costPairs(o.pairs, ops)
	if err != nil {
		return err
	}
	calls := make([]func(int) error, len(ops))
	for k, op := range ops {
		if calls[k], err = cell(op); err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
	}
	load0 := loadAvg()
	shared := sharedTenants(ops)
	m, err := measureInterleaved(ctx, client, ops, calls, o)
	if err != nil {
		return err
	}
	kept := "every call kept"
	if o.block > 1 {
		kept = "the first of each block not kept"
	}
	order := "reversed every other round"
	if o.shuffle {
		order = "in an order drawn per round"
	}
	fmt.Fprintf(w, "scriptcost -interleave: %d rounds (after %d unmeasured) of %s in turn, %s, in blocks of %d calls per op (%s); %s, one connection\n",
		o.rounds, o.warmup, strings.Join(ops, ", "), order, max(1, o.block), kept, how)
	fmt.Fprintf(w, "load average at start %s, at end %s\n", load0, loadAvg())
	for _, s := range shared {
		fmt.Fprintf(w, "note: %s run on one tenant\n", s)
	}
	fmt.Fprintf(w, "Redis time: SLOWLOG (slower-than %d µs), %d script calls, %.0f µs; INFO commandstats over the same rounds: %d calls, %d µs\n",
		o.slowerThan, m.slowCalls, m.slowUS, m.statCalls, m.statUS)
	fmt.Fprintf(w, "commands inside the scripts over the threshold, logged inside their time, per call:")
	for k, op := range ops {
		fmt.Fprintf(w, " %s %.2f", op, float64(m.inner[k])/float64(max(1, len(m.redisUS[k]))))
	}
	fmt.Fprint(w, "\n\n")
	writeInterleaveReport(w, ops, pairs, m.redisUS, m.cpuUS, o.resamples)
	if o.raw != "" {
		return writeInterleaveRaw(o.raw, ops, o.warmup, m)
	}
	return nil
}

// writeInterleaveRaw writes every measured call as a CSV row: round, op,
// Redis µs, client CPU µs (the round's order is roundOrder's).
func writeInterleaveRaw(path string, ops []string, warmup int, m *interleaveRun) error {
	var b strings.Builder
	b.WriteString("round,op,redis_us,client_cpu_us\n")
	perRound := max(1, m.block-1)
	for i := range m.redisUS[0] {
		r := warmup + i/perRound
		for _, k := range roundOrder(r, len(ops), m.shuffle) {
			fmt.Fprintf(&b, "%d,%s,%g,%g\n", r, ops[k], m.redisUS[k][i], m.cpuUS[k][i])
		}
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// measureInterleaved sets SLOWLOG up and runs o.warmup unmeasured, then
// o.rounds measured rounds of calls (one per op).
func measureInterleaved(ctx context.Context, client *redis.Client, ops []string, calls []func(int) error, o interleaveOptions) (*interleaveRun, error) {
	for _, kv := range [][2]string{{"slowlog-max-len", strconv.Itoa(slowlogLen)}, {"slowlog-log-slower-than", strconv.Itoa(o.slowerThan)}} {
		if err := client.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			return nil, fmt.Errorf("config set %s: %w", kv[0], err)
		}
	}
	o.block = max(1, o.block)
	if o.batch <= 0 { // logging every command, a reserve logs about 16
		o.batch = max(1, slowlogLen/4/len(ops)/o.block)
		if o.slowerThan == 0 {
			o.batch = max(1, slowlogLen/64/len(ops)/o.block)
		}
	}
	rec := &scriptRecorder{cell: -1}
	client.AddHook(rec)
	m := &interleaveRun{client: client, calls: calls, ops: ops, rec: rec, batch: o.batch, block: o.block, shuffle: o.shuffle}
	if err := m.rounds(ctx, 0, o.warmup, false); err != nil {
		return nil, err
	}
	calls0, usec0 := scriptStats(client)
	if err := m.rounds(ctx, o.warmup, o.warmup+o.rounds, true); err != nil {
		return nil, err
	}
	calls1, usec1 := scriptStats(client)
	m.statCalls, m.statUS = calls1-calls0, usec1-usec0
	return m, nil
}

// interleaveRun holds the measured rounds' figures: per op, Redis's µs and
// this process's CPU µs of each call kept, in the order made.
type interleaveRun struct {
	client         *redis.Client
	calls          []func(int) error
	ops            []string
	rec            *scriptRecorder
	batch, block   int
	shuffle        bool
	redisUS, cpuUS [][]float64
	// inner is per op the entries of commands its calls ran (logged inside
	// the call's time) in the measured rounds.
	inner []int
	// INFO commandstats and SLOWLOG over the measured rounds (every call,
	// kept or not): script calls and µs.
	statCalls, statUS, slowCalls int64
	slowUS                       float64
}

// roundOrder is round r's order of calls, as indexes into the ops: the
// -ops order in even rounds, reversed in odd ones, so no op always runs
// first or right after the same one (A B B A ...), and the two ops of a
// pair next to each other in -ops are adjacent in every round.
//
// With shuffle, round r's order is a permutation drawn from r instead:
// with the fixed order the scripts' garbage collection (Lua's incremental
// collector, paid by whichever call allocates while a cycle runs) can lock
// onto the rounds' period and land on one op's calls every other round.
func roundOrder(r, ops int, shuffle bool) []int {
	if shuffle {
		return rand.New(rand.NewSource(int64(r))).Perm(ops)
	}
	order := make([]int, ops)
	for j := range order {
		order[j] = j
		if r%2 == 1 {
			order[j] = ops - 1 - j
		}
	}
	return order
}

// kept is xs (one op's calls, a block per round) without the first call of
// each block when blocks are longer than one: that call follows another
// op's, the others follow their own op's, as in a run of one op.
func (m *interleaveRun) kept(xs []float64) []float64 {
	if m.block == 1 {
		return xs
	}
	out := make([]float64, 0, len(xs))
	for i, x := range xs {
		if i%m.block != 0 {
			out = append(out, x)
		}
	}
	return out
}

// rounds runs rounds [from, to) in batches, reading and resetting SLOWLOG
// after each; with keep it records the figures.
func (m *interleaveRun) rounds(ctx context.Context, from, to int, keep bool) error {
	if m.redisUS == nil {
		m.redisUS, m.cpuUS, m.inner = make([][]float64, len(m.ops)), make([][]float64, len(m.ops)), make([]int, len(m.ops))
	}
	for start := from; start < to; start += m.batch {
		end := min(start+m.batch, to)
		if err := m.client.Do(ctx, "SLOWLOG", "RESET").Err(); err != nil {
			return fmt.Errorf("slowlog reset: %w", err)
		}
		m.rec.reset()
		cpu := make([][]float64, len(m.ops))
		for r := start; r < end; r++ {
			for _, k := range roundOrder(r, len(m.ops), m.shuffle) {
				m.rec.setCell(k)
				for b := 0; b < m.block; b++ {
					c0 := processCPU()
					err := m.calls[k](r*m.block + b)
					c1 := processCPU()
					if err != nil {
						m.rec.setCell(-1)
						return fmt.Errorf("%s (round %d): %w", m.ops[k], r, err)
					}
					cpu[k] = append(cpu[k], float64(c1-c0)/float64(time.Microsecond))
				}
				m.rec.setCell(-1)
			}
		}
		entries, err := readSlowlog(ctx, m.client)
		if err != nil {
			return err
		}
		per, inner, err := attributeSlowlog(entries, m.rec.calls(), len(m.ops))
		if err != nil {
			return fmt.Errorf("rounds %d-%d: %w", start, end-1, err)
		}
		for k := range m.ops {
			if len(per[k]) != (end-start)*m.block {
				return fmt.Errorf("rounds %d-%d: SLOWLOG holds %d script calls of %s, %d calls were made (each call must be exactly one script command)",
					start, end-1, len(per[k]), m.ops[k], (end-start)*m.block)
			}
			if keep {
				m.slowCalls += int64(len(per[k]))
				for _, v := range per[k] {
					m.slowUS += v
				}
				m.inner[k] += inner[k]
				m.redisUS[k] = append(m.redisUS[k], m.kept(per[k])...)
				m.cpuUS[k] = append(m.cpuUS[k], m.kept(cpu[k])...)
			}
		}
	}
	return nil
}

// slowEntry is one SLOWLOG entry: its id, Redis's µs and the arguments as
// SLOWLOG keeps them.
type slowEntry struct {
	id   int64
	us   float64
	args []string
}

// sentCall is one script command as the client sent it, with the op (cell
// index) that sent it.
type sentCall struct {
	cell int
	args []string
}

// readSlowlog reads every SLOWLOG entry, oldest first, and fails when any
// may have been lost: the log full, or a gap in the entry ids.
func readSlowlog(ctx context.Context, c *redis.Client) ([]slowEntry, error) {
	logs, err := c.SlowLogGet(ctx, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("slowlog get: %w", err)
	}
	if len(logs) >= slowlogLen {
		return nil, fmt.Errorf("SLOWLOG full (%d entries): entries may be lost; use a smaller batch", len(logs))
	}
	out := make([]slowEntry, len(logs))
	for i, l := range logs { // newest first
		out[len(logs)-1-i] = slowEntry{id: l.ID, us: float64(l.Duration) / float64(time.Microsecond), args: l.Args}
	}
	for i := 1; i < len(out); i++ {
		if out[i].id != out[i-1].id+1 {
			return nil, fmt.Errorf("SLOWLOG ids %d then %d: entries lost", out[i-1].id, out[i].id)
		}
	}
	return out, nil
}

// attributeSlowlog gives each script entry of SLOWLOG to the op that sent
// it: the n-th script entry is the n-th script command sent, and its
// arguments must be that command's (as SLOWLOG truncates them), or the
// attribution fails. It returns Redis's µs per op in the order sent.
// The other entries logged before a script call's own (the commands it ran
// over the threshold; Redis logs each when it ends) are counted per op in
// inner; SLOWLOG's, CONFIG's and INFO's own entries are not.
func attributeSlowlog(entries []slowEntry, sent []sentCall, cells int) (per [][]float64, inner []int, err error) {
	var scripts []slowEntry
	var before []int // per script entry, the other entries logged since the last
	n := 0
	for _, e := range entries {
		switch {
		case len(e.args) > 0 && isScriptCommand(e.args[0]):
			scripts = append(scripts, e)
			before = append(before, n)
			n = 0
		case len(e.args) > 0 && slices.Contains([]string{"slowlog", "config", "info"}, strings.ToLower(e.args[0])):
		default:
			n++
		}
	}
	if len(scripts) != len(sent) {
		return nil, nil, fmt.Errorf("SLOWLOG holds %d script calls, %d were sent", len(scripts), len(sent))
	}
	per, inner = make([][]float64, cells), make([]int, cells)
	for i, s := range sent {
		want := slowlogArgs(s.args)
		if !slices.Equal(want, scripts[i].args) {
			return nil, nil, fmt.Errorf("script call %d (op %d): SLOWLOG entry %d has arguments %q, the call sent %q",
				i, s.cell, scripts[i].id, scripts[i].args, want)
		}
		per[s.cell] = append(per[s.cell], scripts[i].us)
		inner[s.cell] += before[i]
	}
	return per, inner, nil
}

func isScriptCommand(name string) bool {
	switch strings.ToLower(name) {
	case "fcall", "fcall_ro", "evalsha", "evalsha_ro", "eval", "eval_ro":
		return true
	}
	return false
}

// slowlogArgs is args as a SLOWLOG entry keeps them (Redis 7,
// slowlogCreateEntry): at most 32, the 32nd then naming how many more there
// were, and each longer than 128 bytes cut there with the rest counted.
func slowlogArgs(args []string) []string {
	const maxArgc, maxString = 32, 128
	n := min(len(args), maxArgc)
	out := make([]string, n)
	for j := 0; j < n; j++ {
		switch {
		case n != len(args) && j == n-1:
			out[j] = fmt.Sprintf("... (%d more arguments)", len(args)-n+1)
		case len(args[j]) > maxString:
			out[j] = args[j][:maxString] + fmt.Sprintf("... (%d more bytes)", len(args[j])-maxString)
		default:
			out[j] = args[j]
		}
	}
	return out
}

// scriptRecorder is a go-redis hook that keeps every script command the
// client sends while an op runs, with the op. It keeps the command as is and
// renders its arguments only after the batch, outside the measured calls.
type scriptRecorder struct {
	mu   sync.Mutex
	cell int // the running op; -1: none
	sent []struct {
		cell int
		cmd  redis.Cmder
	}
}

func (r *scriptRecorder) setCell(k int) { r.mu.Lock(); r.cell = k; r.mu.Unlock() }
func (r *scriptRecorder) reset()        { r.mu.Lock(); r.sent = r.sent[:0]; r.mu.Unlock() }

func (r *scriptRecorder) note(cmd redis.Cmder) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cell >= 0 && isScriptCommand(cmd.Name()) {
		r.sent = append(r.sent, struct {
			cell int
			cmd  redis.Cmder
		}{r.cell, cmd})
	}
}

// calls renders the recorded commands' arguments as sent on the wire.
func (r *scriptRecorder) calls() []sentCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]sentCall, len(r.sent))
	for i, s := range r.sent {
		args := make([]string, len(s.cmd.Args()))
		for j, a := range s.cmd.Args() {
			args[j] = wireArg(a)
		}
		out[i] = sentCall{cell: s.cell, args: args}
	}
	return out
}

// wireArg is a as go-redis writes it (internal/proto Writer.WriteArg) for
// the types the scripts' calls pass.
func wireArg(a any) string {
	switch v := a.(type) {
	case string:
		return v
	case []byte:
		return string(v)
	case float32:
		return strconv.FormatFloat(float64(v), 'f', -1, 64)
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case bool:
		if v {
			return "1"
		}
		return "0"
	case time.Duration:
		return strconv.FormatInt(v.Nanoseconds(), 10)
	case encoding.BinaryMarshaler:
		b, err := v.MarshalBinary()
		if err != nil {
			return fmt.Sprintf("<%v>", err)
		}
		return string(b)
	}
	return fmt.Sprint(a)
}

func (r *scriptRecorder) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *scriptRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.note(cmd)
		return next(ctx, cmd)
	}
}

func (r *scriptRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			r.note(c)
		}
		return next(ctx, cmds)
	}
}

// sharedTenants names the ops of ops that reserve on the same tenant
// (scriptcostMain's cells: reserve, reserve-spread, commit and release on
// one, reserve-gov5 and reserve-gov5-spread on another).
func sharedTenants(ops []string) []string {
	tenants := map[string]string{"reserve": "cost", "reserve-spread": "cost", "commit": "cost", "release": "cost",
		"reserve-gov5": "costgov", "reserve-gov5-spread": "costgov"}
	by := map[string][]string{}
	var order []string
	for _, op := range ops {
		t, ok := tenants[op]
		if !ok || slices.Contains(by[t], op) {
			continue
		}
		if by[t] == nil {
			order = append(order, t)
		}
		by[t] = append(by[t], op)
	}
	var out []string
	for _, t := range order {
		if len(by[t]) > 1 {
			out = append(out, strings.Join(by[t], " and "))
		}
	}
	return out
}

// costPairs parses -pairs ("op/base,…") into index pairs into ops; empty,
// every op named with a governance or policy variant (gov5, pol10-read,
// pol10, rl) or twin against the same op without it, when both are in ops.
func costPairs(spec string, ops []string) ([][2]int, error) {
	index := func(op string) int { return slices.Index(ops, op) }
	var out [][2]int
	if spec == "" {
		for k, op := range ops {
			if index(op) != k {
				continue // named twice: the first is the one paired
			}
			for _, tag := range []string{"-gov5", "-pol10-read", "-pol10", "-rl", "-twin"} {
				if b := index(strings.Replace(op, tag, "", 1)); strings.Contains(op, tag) && b >= 0 {
					out = append(out, [2]int{k, b})
					break
				}
			}
		}
		return out, nil
	}
	for _, p := range strings.Split(spec, ",") {
		a, b, ok := strings.Cut(p, "/")
		if !ok || index(a) < 0 || index(b) < 0 || a == b {
			return nil, fmt.Errorf("-pairs %q: want op/base with both in -ops and different", p)
		}
		out = append(out, [2]int{index(a), index(b)})
	}
	return out, nil
}

// writeInterleaveReport prints per op the mean, median and 10 % trimmed
// mean of Redis's µs and the client's CPU µs per call, and per pair (op /
// base) the median of the ratios of the two ops' calls in the same round
// with its 95 % interval, and the ratios of the trimmed means and of the
// means with bootstrap 95 % intervals (rounds resampled).
func writeInterleaveReport(w io.Writer, ops []string, pairs [][2]int, redisUS, cpuUS [][]float64, resamples int) {
	if resamples <= 0 {
		resamples = 1000
	}
	fmt.Fprintln(w, "| op | calls | Redis µs mean | median | trimmed mean | client CPU µs mean | median | trimmed mean |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|")
	for k, op := range ops {
		r, c := redisUS[k], cpuUS[k]
		fmt.Fprintf(w, "| `%s` | %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |\n", op, len(r),
			mean(r), bench.MedianOf(r), trimmedMean(r, trimFraction), mean(c), bench.MedianOf(c), trimmedMean(c, trimFraction))
	}
	if len(pairs) == 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| pair | Redis µs: median of per-round ratios [95 %] | ratio of trimmed means [95 %] | ratio of means [95 %] | client CPU: median of per-round ratios [95 %] | ratio of trimmed means [95 %] |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|")
	rng := rand.New(rand.NewSource(1))
	trimmed := func(xs []float64) float64 { return trimmedMean(xs, trimFraction) }
	for _, p := range pairs {
		a, b := p[0], p[1]
		rm, rlo, rhi := medianCI(pairRatios(redisUS[a], redisUS[b]))
		cm, clo, chi := medianCI(pairRatios(cpuUS[a], cpuUS[b]))
		tlo, thi := bootstrapRatio(redisUS[a], redisUS[b], trimmed, resamples, rng)
		mlo, mhi := bootstrapRatio(redisUS[a], redisUS[b], mean, resamples, rng)
		ctlo, cthi := bootstrapRatio(cpuUS[a], cpuUS[b], trimmed, resamples, rng)
		fmt.Fprintf(w, "| `%s` / `%s` | %s | %s | %s | %s | %s |\n", ops[a], ops[b],
			pct(rm, rlo, rhi),
			pct(trimmed(redisUS[a])/trimmed(redisUS[b]), tlo, thi),
			pct(mean(redisUS[a])/mean(redisUS[b]), mlo, mhi),
			pct(cm, clo, chi),
			pct(trimmed(cpuUS[a])/trimmed(cpuUS[b]), ctlo, cthi))
	}
	fmt.Fprintf(w, "\n(trimmed mean: %.0f %% cut at each end; per-round ratio: the op's call over the base's call of the same round; intervals: median by order statistics, ratios of means by %d bootstrap resamples of the rounds)\n",
		trimFraction*100, resamples)
}

const trimFraction = 0.1

// pct shows a ratio and its interval as changes in percent.
func pct(r, lo, hi float64) string {
	return fmt.Sprintf("%+.1f %% [%+.1f, %+.1f]", (r-1)*100, (lo-1)*100, (hi-1)*100)
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

func sortedCopy(xs []float64) []float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s
}

// trimmedMean is the mean of xs without the lowest and highest frac of the
// values.
func trimmedMean(xs []float64, frac float64) float64 {
	s := sortedCopy(xs)
	cut := int(frac * float64(len(s)))
	return mean(s[cut : len(s)-cut])
}

// medianCI is the median of xs with a distribution-free 95 % interval:
// the order statistics n/2 ∓ 1.96·√n/2 (the binomial count of values under
// the median, normal approximation).
func medianCI(xs []float64) (m, lo, hi float64) {
	s := sortedCopy(xs)
	n := len(s)
	if n == 0 {
		return math.NaN(), math.NaN(), math.NaN()
	}
	h := 1.96 * math.Sqrt(float64(n)) / 2
	l := max(0, int(math.Floor(float64(n)/2-h)))
	u := min(n-1, int(math.Ceil(float64(n)/2+h)))
	return bench.MedianOf(s), s[l], s[u]
}

// pairRatios is a[i]/b[i] for every i where b[i] > 0.
func pairRatios(a, b []float64) []float64 {
	out := make([]float64, 0, len(a))
	for i := range min(len(a), len(b)) {
		if b[i] > 0 {
			out = append(out, a[i]/b[i])
		}
	}
	return out
}

// bootstrapRatio is the 95 % percentile interval of stat(a)/stat(b) over
// resamples of the pairs (i drawn with replacement, a[i] and b[i] together).
func bootstrapRatio(a, b []float64, stat func([]float64) float64, resamples int, rng *rand.Rand) (lo, hi float64) {
	n := min(len(a), len(b))
	if n == 0 {
		return math.NaN(), math.NaN()
	}
	ra, rb := make([]float64, n), make([]float64, n)
	ratios := make([]float64, resamples)
	for s := range ratios {
		for i := range n {
			j := rng.Intn(n)
			ra[i], rb[i] = a[j], b[j]
		}
		ratios[s] = stat(ra) / stat(rb)
	}
	slices.Sort(ratios)
	return ratios[int(0.025*float64(resamples))], ratios[min(resamples-1, int(0.975*float64(resamples)))]
}
