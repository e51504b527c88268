package archiver

import (
	"context"
	"maps"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cyclesgo/cycles-go/internal/archive"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/ledger"
	"github.com/cyclesgo/cycles-go/test/pgtest"
	"github.com/cyclesgo/cycles-go/test/redistest"
	"github.com/cyclesgo/cycles-go/test/scripttest"
)

// TestArchiveOnEveryBackend: a round on each backend (the shared
// redis-server, or the Cluster with CYCLES_TEST_REDIS=cluster, and the
// embedded store of dev mode) archives every settled reservation once, its
// row rebuilding the Redis record field for field (the records are read
// with pipelined HGETALLs, not by the queue script), gives each record its
// hot-window TTL and empties the queue. Queue entries naming a record that
// is gone, or none, are dropped with nothing written for them: no row, no
// key created by the TTL.
func TestArchiveOnEveryBackend(t *testing.T) {
	for _, be := range redistest.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			ctx := context.Background()
			ex := scripttest.New(t, be)
			if err := ex.Load(ctx); err != nil {
				t.Fatal(err)
			}
			dsn := pgtest.SharedDatabase(t)
			st, err := archive.Open(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(st.Close)
			r := &rig{t: t, ctx: ctx, c: be.Client, exec: ex, store: st, dsn: dsn,
				led: ledger.New(ex, ledger.Options{Archive: true})}
			tn := "arc-be-" + be.Name + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
			tk := keys.Tenant(tn)
			r.tenant(tn)
			ids := r.settle(tn, 3)
			// Between the settles: an entry whose record is gone, one that
			// names no record, then more settles (the batches of 2 straddle them).
			for _, v := range [][]string{{"id", "r_gone"}, {"other", "x"}} {
				if err := be.Client.XAdd(ctx, &redis.XAddArgs{Stream: tk.ArchiveQueue(), Values: v}).Err(); err != nil {
					t.Fatal(err)
				}
			}
			ids = append(ids, r.settle(tn, 2)...)
			before := map[string]map[string]string{}
			for _, id := range ids {
				before[id] = be.Client.HGetAll(ctx, tk.Reservation(id)).Val()
			}
			const hot = time.Hour
			n, err := r.archiver(ArchiverOptions{HotRetention: hot, BatchSize: 2}).Once(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if n < int64(len(ids)) {
				t.Fatalf("archived %d rows, want at least this tenant's %d", n, len(ids))
			}
			if got := r.rows(tn); got != len(ids) {
				t.Fatalf("%d rows, want %d", got, len(ids))
			}
			for _, id := range ids {
				row, ok, err := st.GetReservation(ctx, tn, id)
				if err != nil || !ok {
					t.Fatalf("%s not archived: %v", id, err)
				}
				back, err := RecordOf(row)
				if err != nil {
					t.Fatal(err)
				}
				if !maps.Equal(back, before[id]) {
					t.Fatalf("%s: archived record\n got %q\nwant %q", id, back, before[id])
				}
				if ttl := be.Client.PTTL(ctx, tk.Reservation(id)).Val(); ttl <= 0 || ttl > hot {
					t.Fatalf("%s: PTTL %v after archiving, want the hot window", id, ttl)
				}
			}
			if _, ok, _ := st.GetReservation(ctx, tn, "r_gone"); ok {
				t.Fatal("a row for a record that is gone")
			}
			if ex := be.Client.Exists(ctx, tk.Reservation("r_gone")).Val(); ex != 0 {
				t.Fatal("the gone record's key exists after the round")
			}
			if q := r.queued(tn); q != 0 {
				t.Fatalf("%d entries still queued", q)
			}
		})
	}
}
