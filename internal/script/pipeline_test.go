package script

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/test/redistest"
	"golang.org/x/sync/errgroup"
)

// echoProbe answers with its argument and counts its runs per key.
const echoProbe = `
local n = redis.call('INCR', KEYS[1])
return ok({echo = ARGV[1], n = n})
`

// spinProbe keeps Redis busy for ARGV[1] ms (Redis TIME), then counts.
const spinProbe = `
local t0 = now_ms()
while now_ms() - t0 < tonumber(ARGV[1]) do end
redis.call('INCR', KEYS[1])
return ok({})
`

func pipelineExecutor(t *testing.T, be redistest.Backend, inflight int) *Executor {
	t.Helper()
	ex := probeExec(t, be.Client, map[string]string{"test/echo": echoProbe, "test/spin": spinProbe}, modeOf(be)...)
	WithMaxInFlight(inflight)(ex)
	return ex
}

// Many concurrent callers through two execution slots: every caller gets
// its own answer, every script ran exactly once, and most calls travelled
// in pipelines.
func TestPipelinedCallsGetTheirOwnAnswers(t *testing.T) {
	for _, be := range redistest.AllModes(t) {
		t.Run(be.Name, func(t *testing.T) {
			ex := pipelineExecutor(t, be, 2)
			counter := freshTag("pipe", be) + "n"
			const workers, each = 32, 40
			var g errgroup.Group
			for w := 0; w < workers; w++ {
				g.Go(func() error {
					for i := 0; i < each; i++ {
						want := fmt.Sprintf("w%d-%d", w, i)
						var out struct {
							Echo string `json:"echo"`
						}
						if err := ex.RunInto(context.Background(), &out, def("test/echo"), []string{counter}, want); err != nil {
							return err
						}
						if out.Echo != want {
							return fmt.Errorf("asked %s, got %s", want, out.Echo)
						}
					}
					return nil
				})
			}
			if err := g.Wait(); err != nil {
				t.Fatal(err)
			}
			n, err := be.Client.Get(context.Background(), counter).Int()
			if err != nil || n != workers*each {
				t.Fatalf("script ran %d times (%v), want %d", n, err, workers*each)
			}
			st := ex.PipelineStats()
			if st.Pipelines == 0 || st.Calls < 2*st.Pipelines {
				t.Fatalf("no pipelining under 32 concurrent callers and 2 slots: %+v", st)
			}
			t.Logf("%d of %d calls in %d pipelines", st.Calls, workers*each, st.Pipelines)
		})
	}
}

// One caller at a time never pipelines: its commands are plain EVALSHAs.
func TestSequentialCallsAreNotPipelined(t *testing.T) {
	be := redistest.Backends(t)[0]
	ex := pipelineExecutor(t, be, 1)
	for i := 0; i < 20; i++ {
		if _, err := ex.Run(context.Background(), def("test/echo"), []string{"cy:{t:seq}:n"}, "x"); err != nil {
			t.Fatal(err)
		}
	}
	if st := ex.PipelineStats(); st != (PipelineStats{}) {
		t.Fatalf("sequential calls were pipelined: %+v", st)
	}
}

func TestPipeliningCanBeTurnedOff(t *testing.T) {
	be := redistest.Backends(t)[0]
	ex := pipelineExecutor(t, be, 0)
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Go(func() {
			for i := 0; i < 10; i++ {
				if _, err := ex.Run(context.Background(), def("test/echo"), []string{"cy:{t:off}:n"}, "x"); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if st := ex.PipelineStats(); st != (PipelineStats{}) {
		t.Fatalf("pipelining is off but %+v", st)
	}
}

// A call queued behind a busy slot that runs out of time is answered with
// UNAVAILABLE at its deadline and never sent.
func TestQueuedCallHonoursItsDeadline(t *testing.T) {
	be := redistest.Backends(t)[0]
	ex := pipelineExecutor(t, be, 1)
	key := "cy:{t:deadline-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "}:n"
	busy := make(chan error, 1)
	go func() {
		_, err := ex.Run(context.Background(), def("test/spin"), []string{key}, "1000")
		busy <- err
	}()
	// Wait until the spin holds the only slot.
	for deadline := time.Now().Add(5 * time.Second); ; {
		ex.pipe.mu.Lock()
		active := ex.pipe.active
		ex.pipe.mu.Unlock()
		if active == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("spin never started")
		}
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := ex.Run(ctx, def("test/spin"), []string{key}, "0")
	// Well before the slot frees (the spin holds it for 1 s), with room for
	// a loaded machine's scheduling delays past the 20 ms.
	if took := time.Since(start); took > 700*time.Millisecond {
		t.Fatalf("queued call returned after %v, want about its 20 ms deadline (the busy slot frees after 1 s)", took)
	}
	if !apierr.HasCode(err, apierr.Unavailable) {
		t.Fatalf("err = %v, want UNAVAILABLE", err)
	}
	if err := <-busy; err != nil {
		t.Fatal(err)
	}
	// Let any (wrongly) sent call land, then check only the spin ran.
	if _, err := ex.Run(context.Background(), def("test/echo"), []string{key + "x"}, "x"); err != nil {
		t.Fatal(err)
	}
	if n, _ := be.Client.Get(context.Background(), key).Int(); n != 1 {
		t.Fatalf("counter = %d, want 1: the timed-out call was sent", n)
	}
}

// After SCRIPT FLUSH, pipelined EVALSHAs get NOSCRIPT and are retried with
// EVAL; after FUNCTION FLUSH, FCALLs get "Function not found" and are
// retried after loading the library again; callers never see either.
func TestPipelineReloadsFlushedScripts(t *testing.T) {
	for _, functions := range []bool{false, true} {
		t.Run(fmt.Sprintf("functions=%v", functions), func(t *testing.T) {
			testPipelineReloadsFlushedScripts(t, functions)
		})
	}
}

func testPipelineReloadsFlushedScripts(t *testing.T, functions bool) {
	srv := redistest.Start(t)
	be := redistest.Backend{Name: "private", Client: srv.Client(t)}
	ex := pipelineExecutor(t, be, 1)
	flush := func() error { return be.Client.ScriptFlush(context.Background()).Err() }
	if functions {
		ex.functions = true
		ex.prepare()
		flush = func() error { return be.Client.FunctionFlush(context.Background()).Err() }
	}
	ctx := context.Background()
	if err := ex.Load(ctx); err != nil {
		t.Fatal(err)
	}
	// A pipeline sent right after the flush: every EVALSHA in it fails with
	// NOSCRIPT and is retried.
	if err := flush(); err != nil {
		t.Fatal(err)
	}
	var batch []*call
	for i := 0; i < 3; i++ {
		batch = append(batch, &call{ctx: ctx, r: ex.runners["test/echo"], keys: []string{"cy:{t:flush}:n"},
			args: []any{strconv.Itoa(i)}, done: make(chan struct{})})
	}
	ex.pipe.exec(batch)
	for i, c := range batch {
		<-c.done
		if c.err != nil {
			t.Fatalf("call %d after flush: %v", i, c.err)
		}
	}
	if st := ex.PipelineStats(); st.Pipelines != 1 || st.Calls != 3 {
		t.Fatalf("stats %+v, want the three calls in one pipeline", st)
	}
	for round := 0; round < 2; round++ {
		if err := flush(); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for w := 0; w < 16; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				raw, err := ex.Run(ctx, def("test/echo"), []string{"cy:{t:flush}:n"}, strconv.Itoa(w))
				if err != nil {
					t.Error(err)
					return
				}
				var out struct{ Echo string }
				if json.Unmarshal(raw, &out) != nil || out.Echo != strconv.Itoa(w) {
					t.Errorf("worker %d got %s", w, raw)
				}
			}(w)
		}
		wg.Wait()
	}
}
