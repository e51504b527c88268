package script

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Automatic pipelining of concurrent script calls.
//
// Each EVALSHA sent on its own costs a pool checkout (go-redis also checks
// the connection's health with a syscall), a write and a read in cyclesd,
// and a read, a write and an event-loop wake-up in Redis. Under load those
// were a fifth of cyclesd's CPU and a large part of Redis's. So at most
// maxInFlight script executions run at a time: a call that finds a free
// slot runs at once on its own (an idle server adds no latency, and a
// single caller's commands look exactly as before), and calls that arrive
// while every slot is busy queue up; whichever execution finishes next takes
// the whole queue (up to maxBatch) as one pipeline: one write, one read, one
// wake-up for all of them. Redis still runs each script atomically and in
// arrival order; pipelining changes framing only, never semantics.
//
// A queued call whose context ends before it is sent is answered with the
// context's error and never sent; once sent, it is exactly like a direct
// call whose context ended mid-flight (the script may have run). The
// pipeline's deadline is the latest of its calls' deadlines, so no call is
// cut short by another's.
//
// Only scripts defined Pipelined (def.go) share a pipeline; every other call
// runs directly, on its own, outside the slots.

// DefaultMaxInFlight is the number of concurrent script executions (each a
// direct call or a pipeline) per Executor.
const DefaultMaxInFlight = 8

// maxBatch bounds one pipeline.
const maxBatch = 64

// WithMaxInFlight sets how many script executions run at once; further
// concurrent calls are pipelined. n <= 0 turns pipelining off (every call
// is its own EVALSHA on its own pooled connection).
func WithMaxInFlight(n int) Option {
	return func(e *Executor) {
		if n <= 0 {
			e.pipe = nil
			return
		}
		e.pipe = newPipeliner(e.client, n)
	}
}

type pipeliner struct {
	client redis.UniversalClient
	max    int

	mu     sync.Mutex
	active int
	queue  []*call

	// pipelines and pipelined count what was sent in pipelines (tests and
	// Stats).
	pipelines, pipelined atomic.Int64
}

type call struct {
	ctx  context.Context
	r    runner
	keys []string
	args []any
	res  any
	err  error
	done chan struct{}
}

func newPipeliner(client redis.UniversalClient, max int) *pipeliner {
	return &pipeliner{client: client, max: max}
}

// run executes one script call, directly or (if it may share) as part of a
// pipeline.
func (p *pipeliner) run(ctx context.Context, r runner, share bool, keys []string, args []any) (any, error) {
	if !share {
		return r.do(ctx, p.client, keys, args)
	}
	p.mu.Lock()
	if p.active < p.max {
		p.active++
		p.mu.Unlock()
		res, err := r.do(ctx, p.client, keys, args)
		p.release()
		return res, err
	}
	c := &call{ctx: ctx, r: r, keys: keys, args: args, done: make(chan struct{})}
	p.queue = append(p.queue, c)
	p.mu.Unlock()
	select {
	case <-c.done:
		return c.res, c.err
	case <-ctx.Done():
		// Still queued: withdraw it (it is never sent). Already taken into
		// a pipeline: it runs or has run; the answer is dropped, as a
		// direct call's would be.
		p.mu.Lock()
		for i, q := range p.queue {
			if q == c {
				p.queue = append(p.queue[:i], p.queue[i+1:]...)
				break
			}
		}
		p.mu.Unlock()
		return nil, ctx.Err()
	}
}

// release ends one execution: the slot goes to the queued calls, if any
// (as a pipeline run by a new goroutine), else it is freed.
func (p *pipeliner) release() {
	if batch := p.take(); batch != nil {
		go p.drain(batch)
	}
}

// take returns the next batch, keeping the caller's slot; or nil and frees
// the slot when nothing is queued.
func (p *pipeliner) take() []*call {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.queue) == 0 {
		p.active--
		return nil
	}
	n := len(p.queue)
	if n > maxBatch {
		n = maxBatch
	}
	batch := make([]*call, n)
	copy(batch, p.queue)
	rest := copy(p.queue, p.queue[n:])
	for i := rest; i < len(p.queue); i++ {
		p.queue[i] = nil
	}
	p.queue = p.queue[:rest]
	return batch
}

// drain sends batches until the queue is empty.
func (p *pipeliner) drain(batch []*call) {
	for batch != nil {
		p.exec(batch)
		batch = p.take()
	}
}

// exec sends one batch as a pipeline and answers every call in it.
func (p *pipeliner) exec(batch []*call) {
	live := batch[:0:0]
	var deadline time.Time
	noDeadline := false
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.err = err
			close(c.done)
			continue
		}
		if d, ok := c.ctx.Deadline(); ok {
			if d.After(deadline) {
				deadline = d
			}
		} else {
			noDeadline = true
		}
		live = append(live, c)
	}
	if len(live) == 0 {
		return
	}
	if len(live) == 1 {
		// Nothing to combine with.
		c := live[0]
		c.res, c.err = c.r.do(c.ctx, p.client, c.keys, c.args)
		close(c.done)
		return
	}
	ctx := context.Background()
	if !noDeadline {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	pipe := p.client.Pipeline()
	cmds := make([]*redis.Cmd, len(live))
	for i, c := range live {
		cmds[i] = c.r.queue(ctx, pipe, c.keys, c.args)
	}
	_, _ = pipe.Exec(ctx)
	p.pipelines.Add(1)
	p.pipelined.Add(int64(len(live)))
	for i, c := range live {
		c.res, c.err = cmds[i].Result()
		if c.err != nil && isMissing(c.err) {
			// The script cache was flushed (restart, failover) or the
			// function deleted: do loads it again, as a direct call does.
			c.res, c.err = c.r.do(c.ctx, p.client, c.keys, c.args)
		}
		close(c.done)
	}
}

// PipelineStats are counts of pipelined execution since the Executor was
// made: pipelines sent and the script calls they carried.
type PipelineStats struct {
	Pipelines, Calls int64
}

// PipelineStats reports how much pipelining happened.
func (e *Executor) PipelineStats() PipelineStats {
	if e.pipe == nil {
		return PipelineStats{}
	}
	return PipelineStats{Pipelines: e.pipe.pipelines.Load(), Calls: e.pipe.pipelined.Load()}
}
