package main

import (
	"context"
	"errors"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cyclesgo/cycles-go/bench"
	"github.com/cyclesgo/cycles-go/internal/apierr"
)

// errDone is returned by an op when its worker has nothing left to do (the
// commit phase ran out of reservations); the worker stops without counting.
var errDone = errors.New("worker done")

// opFunc performs one operation for worker w. outcome (optional) labels a
// successful result (e.g. "allowed"/"denied").
type opFunc func(ctx context.Context, w int) (outcome string, err error)

// phaseResult is the raw measurement of one phase.
type phaseResult struct {
	ops      int64
	errors   int64
	codes    map[string]int
	outcomes map[string]int64
	samples  []int64 // latencies (ns) of ops that started after warm-up and ended in the window
	window   time.Duration
	cpu      *bench.CPU
}

// workerStats are one worker's counts (merged after the phase, so the hot
// loop shares nothing).
type workerStats struct {
	samples  []int64
	errors   int64
	codes    map[string]int
	outcomes map[string]int64
	lastEnd  time.Time
	_        [64]byte // keep workers' hot fields on separate cache lines
}

// maxOverrun bounds how long a phase waits past its window for its first
// measured operation.
const maxOverrun = 30 * time.Second

// runPhase runs op on clients workers: warm-up, then the measured window.
// Only operations that start after the warm-up and finish inside the window
// are measured; a worker that returns errDone stops early and the window
// ends at the last measured completion if every worker stopped early. A
// window in which no operation finished (a machine stalled for longer than
// the window) extends to the first completion after it, at most maxOverrun,
// so a cell never reports nothing measured for want of waiting; its duration
// says so.
func runPhase(ctx context.Context, clients int, warmup, window time.Duration, pp pids, op opFunc) phaseResult {
	start := time.Now()
	measureFrom := start.Add(warmup)
	deadline := measureFrom.Add(window)
	hardStop := deadline.Add(maxOverrun)
	var anyMeasured atomic.Bool
	var overrunEnd atomic.Int64 // UnixNano of the one completion measured past the deadline (0: none)
	stats := make([]workerStats, clients)
	var wg sync.WaitGroup
	for w := 0; w < clients; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			st := &stats[w]
			st.samples = make([]int64, 0, 4096)
			for {
				t0 := time.Now()
				if !t0.Before(deadline) && (anyMeasured.Load() || !t0.Before(hardStop)) || ctx.Err() != nil {
					return
				}
				outcome, err := op(ctx, w)
				t1 := time.Now()
				if errors.Is(err, errDone) {
					return
				}
				measured := !t0.Before(measureFrom) && !t1.After(deadline)
				if measured {
					anyMeasured.Store(true)
				} else if !t0.Before(measureFrom) && !t1.After(hardStop) && anyMeasured.CompareAndSwap(false, true) {
					measured = true // the first completion of a window that had none
					overrunEnd.Store(t1.UnixNano())
				}
				if err != nil {
					if measured {
						st.errors++
						if st.codes == nil {
							st.codes = map[string]int{}
						}
						st.codes[errorCode(err)]++
					}
					continue
				}
				if measured {
					st.samples = append(st.samples, int64(t1.Sub(t0)))
					st.lastEnd = t1
					if outcome != "" {
						if st.outcomes == nil {
							st.outcomes = map[string]int64{}
						}
						st.outcomes[outcome]++
					}
				}
			}
		}(w)
	}

	// CPU of every party over the measured window.
	var before, after cpuSample
	doneCh := make(chan struct{})
	go func() { wg.Wait(); close(doneCh) }()
	finishedEarly := false
	select {
	case <-time.After(time.Until(measureFrom)):
		before = pp.sample()
	case <-doneCh:
		finishedEarly = true
	}
	if !finishedEarly {
		select {
		case <-time.After(time.Until(deadline)):
		case <-doneCh:
		}
		if !anyMeasured.Load() {
			<-doneCh // the workers stop at the first measured completion, or at hardStop
		}
		after = pp.sample()
	}
	<-doneCh

	res := phaseResult{codes: map[string]int{}, outcomes: map[string]int64{}}
	var lastEnd time.Time
	for i := range stats {
		st := &stats[i]
		res.samples = append(res.samples, st.samples...)
		res.errors += st.errors
		for k, v := range st.codes {
			res.codes[k] += v
		}
		for k, v := range st.outcomes {
			res.outcomes[k] += v
		}
		if st.lastEnd.After(lastEnd) {
			lastEnd = st.lastEnd
		}
	}
	res.ops = int64(len(res.samples))
	res.window = window
	if end := overrunEnd.Load(); end != 0 {
		res.window = time.Unix(0, end).Sub(measureFrom)
	}
	if end := time.Now(); end.Before(deadline) {
		// Every worker stopped early: the window is what was used.
		res.window = lastEnd.Sub(measureFrom)
		if res.window < 0 {
			res.window = 0
		}
	}
	if !finishedEarly && res.ops > 0 && !after.at.IsZero() {
		el := after.at.Sub(before.at).Seconds()
		kops := float64(res.ops+res.errors) / 1000
		res.cpu = &bench.CPU{
			Redis:       ms(after.redis-before.redis) / kops,
			Server:      ms(after.server-before.server) / kops,
			Client:      ms(after.client-before.client) / kops,
			RedisCores:  (after.redis - before.redis).Seconds() / el,
			ServerCores: (after.server - before.server).Seconds() / el,
			ClientCores: (after.client - before.client).Seconds() / el,
		}
		if reads := after.reads - before.reads; reads > 0 {
			res.cpu.CommandsPerRead = round3(float64(after.scriptCalls-before.scriptCalls) / float64(reads))
		}
		if calls := after.scriptCalls - before.scriptCalls; calls > 0 {
			res.cpu.ScriptUsPerCall = round3(float64(after.scriptUsec-before.scriptUsec) / float64(calls))
			res.cpu.ScriptCallsPerOp = round3(float64(calls) / float64(res.ops+res.errors))
		}
		if pp.redis <= 0 {
			res.cpu.Redis, res.cpu.RedisCores = 0, 0
		}
		if pp.server <= 0 {
			res.cpu.Server, res.cpu.ServerCores = 0, 0
		}
	}
	return res
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// latency summarises samples (ns); it sorts them in place.
func latency(samples []int64) bench.Latency {
	if len(samples) == 0 {
		return bench.Latency{}
	}
	sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
	pct := func(p float64) float64 {
		// Nearest-rank percentile.
		i := int(p*float64(len(samples))+0.999999) - 1
		if i < 0 {
			i = 0
		}
		if i >= len(samples) {
			i = len(samples) - 1
		}
		return float64(samples[i]) / 1e6
	}
	var sum float64
	for _, s := range samples {
		sum += float64(s)
	}
	return bench.Latency{
		P50: round3(pct(0.50)), P95: round3(pct(0.95)), P99: round3(pct(0.99)),
		Max: round3(float64(samples[len(samples)-1]) / 1e6), Mean: round3(sum / float64(len(samples)) / 1e6),
	}
}

func round3(v float64) float64 { return float64(int64(v*1000+0.5)) / 1000 }

// measured is what the phase measured, as the results report it.
func (r phaseResult) measured() bench.Window {
	w := bench.Window{Ops: r.ops, Errors: r.errors, DurationS: round3(r.window.Seconds()), Latency: latency(r.samples), CPU: r.cpu}
	if r.window > 0 {
		w.Throughput = round3(float64(r.ops) / r.window.Seconds())
	}
	return w
}

// cell turns a phase into a result cell.
func (r phaseResult) cell(op, shape string, clients int) bench.Cell {
	c := bench.Cell{Op: op, Shape: shape, Clients: clients, Window: r.measured()}
	if len(r.codes) > 0 {
		c.ErrorCodes = r.codes
	}
	if len(r.outcomes) > 0 {
		c.Outcomes = r.outcomes
	}
	return c
}

// errorCode names an error by gRPC code and protocol reason.
func errorCode(err error) string {
	if reason, _, ok := apierr.FromStatus(err); ok {
		return status.Code(err).String() + "/" + string(reason)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "client-deadline"
	}
	return status.Code(err).String()
}

// ambiguous reports whether a failed mutation may nevertheless have been
// applied (the response was lost): deadline, unavailable, cancelled,
// unknown transport failures. A protocol refusal is definite.
func ambiguous(err error) bool {
	if _, _, ok := apierr.FromStatus(err); ok {
		code := status.Code(err)
		return code == codes.Unavailable || code == codes.Internal
	}
	return true
}
