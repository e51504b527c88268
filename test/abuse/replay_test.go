package abuse

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/events"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/test/crash/cyclesdtest"
)

// replayLog and replayStreams are issue 23's catch-up: a 33k-event log read
// by 32 WatchEvents from START_POSITION_EARLIEST (the per-key stream cap).
const (
	replayLog     = 33_000
	replayStreams = 32
)

// TestReplayDoesNotStarveOtherTenants: issue 23 bug 4. Tenant "replayer" has
// a 33k-event log and 32 streams (in an attacker process) replaying it from
// the start over and over; tenant "probe" keeps reserving and its p99 stays
// within 2 x its baseline + 10 ms (the harness's bound). Before replay
// pacing cyclesd ran at 130-140 % CPU and the probe's p99 went from 2.4 to
// 368 ms; with rate pacing alone (4,000 events/s per tenant, reads of 256
// events, no bound on concurrent reads) it went from 16 ms to 0.5-1.5 s with
// reserves timing out, the reads queueing in Redis together. The log is made of copies of one
// real reservation.denied event appended straight to the tenant's stream
// (33k denied Decides would take most of the suite's time budget).
func TestReplayDoesNotStarveOtherTenants(t *testing.T) {
	d := Start(t)
	a := d.Tenant(t, "replayer")
	ctx := context.Background()
	rt := cyclesv1.NewRuntimeServiceClient(d.conn)
	// One real denied decide (the budget is far smaller than the estimate).
	if _, err := rt.Decide(cyclesdtest.KeyCtx(ctx, a.Key), &cyclesv1.DecideRequest{
		IdempotencyKey: "deny-1", Subject: &cyclesv1.Subject{Workspace: "w"},
		Action:   &cyclesv1.Action{Kind: "llm.completion", Name: "m"},
		Estimate: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 1 << 60},
	}); err != nil {
		t.Fatal(err)
	}
	rdb := d.Redis.Client(t)
	stream := keys.Tenant(a.Name).Events()
	last, err := rdb.XRevRangeN(ctx, stream, "+", "-", 1).Result()
	if err != nil || len(last) != 1 {
		t.Fatalf("no event to copy: %v %v", last, err)
	}
	fields := last[0].Values
	for done := 0; done < replayLog; {
		pipe := rdb.Pipeline()
		for i := 0; i < 1000 && done < replayLog; i, done = i+1, done+1 {
			v := make(map[string]any, len(fields))
			for k, x := range fields {
				v[k] = x
			}
			v["id"] = fmt.Sprintf("evt-copy-%d", done)
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: v})
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// The replayer runs in a process of its own (attacker_test.go): decoding
	// 32 streams of events in this process would slow the probe tenant's
	// client, not cyclesd.
	delivered0 := d.Metric(t, "cycles_events_delivered_total", `rpc="watch"`)
	f := d.UnderAttack(t, Attack{Name: "replay 33k events on 32 streams", Duration: 5 * time.Second, Run: func(ctx context.Context) {
		runAttacker(ctx, t, "replay", d.Addr+" "+a.Key)
	}})
	delivered := d.Metric(t, "cycles_events_delivered_total", `rpc="watch"`) - delivered0
	t.Logf("FIGURES replay: %.0f events delivered to the replayer while attacking (%.0f/s); probe p99 %v -> %v",
		delivered, delivered/(5*float64(f.Attempts)), f.BaseP99, f.AttackP99)
	if delivered == 0 {
		t.Fatal("the replayer received nothing: the attack did not run")
	}
	if n := d.Metric(t, "cycles_events_paced_total"); n < 1 {
		t.Errorf("cycles_events_paced_total = %v: pacing never held a stream back", n)
	}
	// The tenant's rate bound what it read: the attack time (plus a second
	// of slack for the streams still draining) at -watch-tenant-rate, plus
	// the bursts (every stream's and the tenant's).
	attacked := 5*float64(f.Attempts) + 1
	if most := attacked*events.DefaultTenantEventsPerSecond + float64((replayStreams+2)*events.DefaultOptions().ReadBatch); delivered > most {
		t.Errorf("the replayer got %.0f events, more than the tenant rate allows (%.0f)", delivered, most)
	}
}

// replayOnce reads the replayer's whole log on one stream from
// START_POSITION_EARLIEST and closes the stream; it reports whether it got
// to the end. A refusal (the stream cap while a stream closes) is waited out
// briefly rather than retried in a loop.
func replayOnce(ctx context.Context, ev cyclesv1.EventServiceClient, key string, delivered *atomic.Int64) bool {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := ev.WatchEvents(cyclesdtest.KeyCtx(ctx, key), &cyclesv1.WatchEventsRequest{
		Start: cyclesv1.StartPosition_START_POSITION_EARLIEST})
	for n := 0; err == nil && n <= replayLog; n++ {
		if _, err = st.Recv(); err == nil {
			delivered.Add(1)
		}
	}
	if err != nil && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
		return false
	}
	return err == nil
}

// replayer is the out-of-process attack: target is "<grpc addr> <api key>";
// replayStreams streams replay the key's tenant log from the start, over and
// over, until ctx ends.
func replayer(ctx context.Context, target string) {
	addr, key, _ := strings.Cut(target, " ")
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return
	}
	defer conn.Close()
	ev := cyclesv1.NewEventServiceClient(conn)
	var delivered atomic.Int64
	var wg sync.WaitGroup
	for range replayStreams {
		wg.Go(func() {
			for ctx.Err() == nil {
				replayOnce(ctx, ev, key, &delivered)
			}
		})
	}
	wg.Wait()
}
