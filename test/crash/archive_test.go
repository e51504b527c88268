package crash

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/test/crash/cyclesdtest"
	"github.com/cyclesgo/cycles-go/test/pgtest"
	"github.com/cyclesgo/cycles-go/test/redistest"
)

// TestArchiveSurvivesCrashes: two replicas archive to one PostgreSQL while
// reservations settle. The replica that reports holding the archiver lease
// (cycles_archive_lease_held 1, the other 0) is SIGKILLed mid-traffic,
// PostgreSQL is killed and restarted, the survivor takes the lease over
// once the dead holder's lapses (it then reports 1) and is SIGKILLed in
// turn mid-traffic, and the first is restarted. In the end every settled
// reservation is archived exactly once: as many rows as settlements, no
// reservation twice, none missing, nothing left queued.
func TestArchiveSurvivesCrashes(t *testing.T) {
	srv := redistest.Start(t)
	pg := pgtest.Start(t)
	dsn := pgtest.NewDatabase(t, pg)
	args := []string{"-archive-dsn", dsn, "-hot-retention", "1h"}
	a := cyclesdtest.Start(t, binary, srv.Addr, args...)
	a.WaitServing(t)
	b := cyclesdtest.Start(t, binary, srv.Addr, args...)
	b.WaitServing(t)
	const tn = "arc-crash"
	key := cyclesdtest.Provision(t, a.Conn(t), tn, cyclesdtest.Budget{Allocated: 1 << 40})
	ids := map[string]bool{}
	settle := func(d *cyclesdtest.Daemon, from, n int) {
		t.Helper()
		rt := cyclesv1.NewRuntimeServiceClient(d.Conn(t))
		ctx := cyclesdtest.KeyCtx(context.Background(), key)
		for i := from; i < from+n; i++ {
			res, err := rt.CreateReservation(ctx, &cyclesv1.CreateReservationRequest{IdempotencyKey: fmt.Sprintf("k%d", i),
				Subject: &cyclesv1.Subject{Workspace: "w"}, Action: &cyclesv1.Action{Kind: "llm.completion", Name: "m"},
				Estimate: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 10}})
			if err != nil {
				t.Fatal(err)
			}
			id := res.GetReservationId()
			if i%2 == 0 {
				_, err = rt.CommitReservation(ctx, &cyclesv1.CommitReservationRequest{ReservationId: id, IdempotencyKey: "c" + id,
					Actual: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 7}})
			} else {
				_, err = rt.ReleaseReservation(ctx, &cyclesv1.ReleaseReservationRequest{ReservationId: id, IdempotencyKey: "r" + id})
			}
			if err != nil {
				t.Fatal(err)
			}
			ids[id] = true
		}
	}
	settle(a, 0, 300)
	holder := leaseHolder(t, 30*time.Second, a, b)
	survivor := a
	if holder == a {
		survivor = b
	}
	holder.Kill() // likely mid-batch: the archiver copies as traffic settles
	settle(survivor, 300, 300)
	pg.Kill()
	settle(survivor, 600, 200) // queued in Redis while PostgreSQL is down
	if err := pg.Restart(); err != nil {
		t.Fatal(err)
	}
	settle(survivor, 800, 200)
	// The dead holder's lease lapses (30 s) and the survivor takes it.
	leaseHolder(t, 90*time.Second, survivor)
	settle(survivor, 1000, 200)
	survivor.Kill()
	holder.Restart(t)
	holder.WaitServing(t)

	ctx := context.Background()
	rc := srv.Client(t)
	deadline := time.Now().Add(90 * time.Second)
	var rows, distinct int
	for {
		conn, err := pgx.Connect(ctx, dsn)
		if err == nil {
			err = conn.QueryRow(ctx, "SELECT count(*), count(DISTINCT rid) FROM cycles_reservations WHERE tenant_id = $1", tn).
				Scan(&rows, &distinct)
			conn.Close(ctx)
		}
		queued := rc.XLen(ctx, keys.Tenant(tn).ArchiveQueue()).Val()
		if err == nil && queued == 0 && rows >= len(ids) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 90 s: %d rows (%d distinct) of %d settled, %d still queued, %v", rows, distinct, len(ids), queued, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if rows != len(ids) || distinct != len(ids) {
		t.Fatalf("%d rows, %d distinct reservations, %d settled: want each archived exactly once", rows, distinct, len(ids))
	}
}

// leaseHolder waits until exactly one of ds reports holding the archiver
// lease in its last round (cycles_archive_lease_held 1; every other 0) and
// returns it.
func leaseHolder(t *testing.T, within time.Duration, ds ...*cyclesdtest.Daemon) *cyclesdtest.Daemon {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var holders []*cyclesdtest.Daemon
		reported := 0
		for _, d := range ds {
			v, ok := cyclesdtest.MetricValue(d.Metrics(t), "cycles_archive_lease_held")
			if ok {
				reported++
			}
			if ok && v == 1 {
				holders = append(holders, d)
			}
		}
		if len(holders) == 1 && reported == len(ds) {
			return holders[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %d of %d replicas report holding the archiver lease (%d report at all), want exactly 1",
				within, len(holders), len(ds), reported)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
