package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/cyclesgo/cycles-go/bench"
	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/auth"
)

// churnClients is the reserving tenant's client count in the churn cell.
const churnClients = 4

// runStreamChurn measures a quiet tenant's reserves (churnClients clients,
// disjoint budgets) while a noisy tenant keeps `churners` goroutines opening
// and closing WatchEvents streams (each open reads its log from the start):
// the isolation of docs/limits.md, as a cell "reserve/stream-churn".
func (b *runner) runStreamChurn(ctx context.Context, churners int) (bench.Cell, bench.LedgerCheck, error) {
	noisy := fmt.Sprintf("bench-%s-noisy", b.runID)
	key, err := b.provisionTenant(ctx, noisy)
	if err != nil {
		return bench.Cell{}, bench.LedgerCheck{}, err
	}
	conn, err := b.dial()
	if err != nil {
		return bench.Cell{}, bench.LedgerCheck{}, err
	}
	defer conn.Close()
	ev := cyclesv1.NewEventServiceClient(conn)
	kctx := metadata.NewOutgoingContext(ctx, metadata.Pairs(auth.APIKeyHeader, key))

	g, err := b.newGroupNamed(ctx, fmt.Sprintf("bench-%s-quiet", b.runID), "disjoint", churnClients)
	if err != nil {
		return bench.Cell{}, bench.LedgerCheck{}, err
	}
	defer g.close()

	churnCtx, stop := context.WithCancel(kctx)
	var opened, refused atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < churners; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for churnCtx.Err() == nil {
				sctx, cancel := context.WithTimeout(churnCtx, callLimit)
				st, err := ev.WatchEvents(sctx, &cyclesv1.WatchEventsRequest{Start: cyclesv1.StartPosition_START_POSITION_EARLIEST})
				if err == nil {
					_, err = st.Recv()
				}
				cancel()
				switch {
				case err == nil:
					opened.Add(1)
				case status.Code(err) == codes.ResourceExhausted:
					refused.Add(1)
				}
			}
		}()
	}
	start := time.Now()
	ph := runPhase(ctx, churnClients, b.cfg.warmup, b.cfg.duration, b.pids, g.opReserve)
	took := time.Since(start)
	stop()
	wg.Wait()
	c := ph.cell("reserve", "stream-churn", churnClients)
	c.Note = fmt.Sprintf("another tenant opened and closed %.0f streams/s from %d goroutines (%d refused by its stream limit)",
		float64(opened.Load())/took.Seconds(), churners, refused.Load())
	return c, g.verify(ctx), nil
}
