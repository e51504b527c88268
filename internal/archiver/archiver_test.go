package archiver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/archive"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/ledger"
	"github.com/cyclesgo/cycles-go/internal/script"
	"github.com/cyclesgo/cycles-go/internal/telemetry/telemetrytest"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
	"github.com/cyclesgo/cycles-go/test/pgtest"
	"github.com/cyclesgo/cycles-go/test/redistest"
	"github.com/cyclesgo/cycles-go/test/scripttest"
)

// rig is a private redis-server (so the registry holds only this test's
// tenants), a fresh archive database and a ledger that queues for it.
type rig struct {
	t     *testing.T
	ctx   context.Context
	c     redis.UniversalClient
	exec  *script.Executor
	store *archive.Store
	dsn   string
	led   *ledger.Ledger
}

// newRig starts a Redis server of the test's own and opens the shared
// archive database, with each of tenants seeded (tenant).
func newRig(t *testing.T, tenants ...string) *rig {
	t.Helper()
	c := redistest.Start(t).Client(t)
	ex := scripttest.On(t, c)
	dsn := pgtest.SharedDatabase(t)
	st, err := archive.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	r := &rig{t: t, ctx: context.Background(), c: c, exec: ex, store: st, dsn: dsn,
		led: ledger.New(ex, ledger.Options{Archive: true})}
	for _, tn := range tenants {
		r.tenant(tn)
	}
	return r
}

func (r *rig) archiver(o ArchiverOptions) *Archiver {
	r.t.Helper()
	a, err := New(r.exec, r.store, o)
	if err != nil {
		r.t.Fatal(err)
	}
	return a
}

func (r *rig) tenant(name string) {
	ledgertest.SeedTenant(r.t, r.c, name, ledgertest.Tenant{})
	ledgertest.SeedBudget(r.t, r.c, name, ledgertest.Budget{Scope: "tenant:" + name, Unit: "TOKENS", Allocated: 1_000_000})
}

func tokens(n int64) *cyclesv1.Amount {
	return &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: n}
}

// settle reserves and settles n reservations of tenant (even: committed,
// odd: released) and returns their ids.
func (r *rig) settle(tenant string, n int) []string {
	r.t.Helper()
	var ids []string
	for i := 0; i < n; i++ {
		key := fmt.Sprintf("k%d-%d", i, time.Now().UnixNano())
		res, err := r.led.Reserve(r.ctx, tenant, &cyclesv1.CreateReservationRequest{IdempotencyKey: key,
			Subject: &cyclesv1.Subject{Workspace: "prod"}, Action: &cyclesv1.Action{Kind: "llm.completion", Name: "m"},
			Estimate: tokens(100)})
		if err != nil {
			r.t.Fatal(err)
		}
		rid := res.GetReservationId()
		if i%2 == 0 {
			_, err = r.led.Commit(r.ctx, tenant, &cyclesv1.CommitReservationRequest{ReservationId: rid, IdempotencyKey: "c" + key, Actual: tokens(40)})
		} else {
			_, err = r.led.Release(r.ctx, tenant, &cyclesv1.ReleaseReservationRequest{ReservationId: rid, IdempotencyKey: "r" + key})
		}
		if err != nil {
			r.t.Fatal(err)
		}
		ids = append(ids, rid)
	}
	return ids
}

// rows counts the archive rows of tenant (all of them, duplicates too:
// the primary key includes the settle time).
func (r *rig) rows(tenant string) int {
	r.t.Helper()
	conn, err := pgx.Connect(r.ctx, r.dsn)
	if err != nil {
		r.t.Fatal(err)
	}
	defer conn.Close(r.ctx)
	var n int
	if err := conn.QueryRow(r.ctx, "SELECT count(*) FROM cycles_reservations WHERE tenant_id = $1", tenant).Scan(&n); err != nil {
		r.t.Fatal(err)
	}
	return n
}

func (r *rig) queued(tenant string) int64 {
	return r.c.XLen(r.ctx, keys.Tenant(tenant).ArchiveQueue()).Val()
}

// TestArchiveOnce: a round copies every settled reservation of every tenant
// to PostgreSQL (the row rebuilds the Redis record field for field), then
// starts each record's hot-window TTL and empties the queues; a second round
// writes nothing.
func TestArchiveOnce(t *testing.T) {
	r := newRig(t)
	tenants := []string{"arc-a", "arc-b"}
	before := map[string]map[string]string{}
	for _, tn := range tenants {
		r.tenant(tn)
		for _, id := range r.settle(tn, 5) {
			f := r.c.HGetAll(r.ctx, keys.Tenant(tn).Reservation(id)).Val()
			if ttl := r.c.PTTL(r.ctx, keys.Tenant(tn).Reservation(id)).Val(); ttl != -1 {
				t.Fatalf("settled record has PTTL %v before it is archived", ttl)
			}
			before[tn+"/"+id] = f
		}
	}
	const hot = time.Hour
	// Batches of 2 of 5 per tenant: two full batches (each written while
	// the next is read ahead) and a last one of 1.
	a := r.archiver(ArchiverOptions{HotRetention: hot, BatchSize: 2})
	n, err := a.Once(r.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != 10 {
		t.Fatalf("archived %d rows, want 10", n)
	}
	for key, f := range before {
		tn, id, _ := cut(key)
		row, ok, err := r.store.GetReservation(r.ctx, tn, id)
		if err != nil || !ok {
			t.Fatalf("%s not archived: %v", key, err)
		}
		back, err := RecordOf(row)
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(back, f) {
			t.Fatalf("%s: archived record\n got %q\nwant %q", key, back, f)
		}
		if ttl := r.c.PTTL(r.ctx, keys.Tenant(tn).Reservation(id)).Val(); ttl <= 0 || ttl > hot {
			t.Fatalf("%s: PTTL %v after archiving, want the hot window", key, ttl)
		}
	}
	for _, tn := range tenants {
		if q := r.queued(tn); q != 0 {
			t.Fatalf("%s: %d entries still queued", tn, q)
		}
		if n := r.rows(tn); n != 5 {
			t.Fatalf("%s: %d rows, want 5", tn, n)
		}
	}
	if s := a.Stats(); !s.Held || s.Pending != 0 || s.Archived != 10 {
		t.Fatalf("stats %+v", s)
	}
	if n, err := a.Once(r.ctx); n != 0 || err != nil {
		t.Fatalf("second round: %d rows, %v", n, err)
	}
}

// TestArchiveAfterCrash: a replica that died after PostgreSQL committed a
// batch but before it trimmed the queue left the entries queued; the next
// round writes none of them again (0 duplicates), still starts their TTL and
// trims them, and archives what was settled since (0 missing).
func TestArchiveAfterCrash(t *testing.T) {
	const tn = "arc-crash"
	r := newRig(t, tn)
	r.settle(tn, 4)
	a := r.archiver(ArchiverOptions{})
	fence, err := a.lease(r.ctx)
	if err != nil || fence == 0 {
		t.Fatalf("lease: %d %v", fence, err)
	}
	// The first half of a round: read and write, no archive/done.
	b, err := a.read(r.ctx, keys.Tenant(tn), "", DefaultArchiverOptions().BatchSize, true)
	if err != nil {
		t.Fatal(err)
	}
	batch := archive.Batch{Stream: "reservations/" + tn, Fence: fence}
	for _, e := range b.entries {
		row, err := RowOf(tn, e.rid, e.fields, b.now)
		if err != nil {
			t.Fatal(err)
		}
		batch.Reservations, batch.Position = append(batch.Reservations, row), e.qid
	}
	if w, err := r.store.Write(r.ctx, batch); err != nil || w.Reservations != 4 {
		t.Fatalf("write: %+v %v", w, err)
	}
	later := r.settle(tn, 3)
	n, err := a.Once(r.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 || r.rows(tn) != 7 || r.queued(tn) != 0 {
		t.Fatalf("after the restart: wrote %d, %d rows, %d queued; want 3, 7, 0", n, r.rows(tn), r.queued(tn))
	}
	for _, e := range b.entries {
		if ttl := r.c.PTTL(r.ctx, keys.Tenant(tn).Reservation(e.rid)).Val(); ttl <= 0 {
			t.Fatalf("%s: PTTL %v; the crashed batch's records never expire", e.rid, ttl)
		}
	}
	for _, id := range later {
		if _, ok, err := r.store.GetReservation(r.ctx, tn, id); !ok || err != nil {
			t.Fatalf("%s missing: %v", id, err)
		}
	}
}

// TestArchiveLease: one replica archives at a time; another takes over once
// the holder gives the lease up (or it lapses) with a larger fence, and the
// old holder's writes are then refused by PostgreSQL.
func TestArchiveLease(t *testing.T) {
	const tn = "arc-lease"
	r := newRig(t, tn)
	r.settle(tn, 2)
	m := telemetrytest.New()
	one, two := r.archiver(ArchiverOptions{}), r.archiver(ArchiverOptions{MeterProvider: m.Provider})
	f1, err := one.lease(r.ctx)
	if err != nil || f1 == 0 {
		t.Fatalf("first lease: %d %v", f1, err)
	}
	if n, err := two.Once(r.ctx); n != 0 || err != nil || two.Stats().Held {
		t.Fatalf("a second replica archived while the lease is held: %d %v", n, err)
	}
	if r.queued(tn) != 2 {
		t.Fatal("queue touched by the replica without the lease")
	}
	// The lease gauge says which replica archives (the crash test kills
	// the one that reports 1).
	if h, ok := m.Gauge(t, "cycles.archive.lease.held"); !ok || h != 0 {
		t.Fatalf("lease gauge of the replica without the lease: %d (%v), want 0", h, ok)
	}
	if err := one.Release(r.ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := two.Once(r.ctx); n != 2 || err != nil {
		t.Fatalf("takeover round: %d %v", n, err)
	}
	if h, ok := m.Gauge(t, "cycles.archive.lease.held"); !ok || h != 1 {
		t.Fatalf("lease gauge of the holder: %d (%v), want 1", h, ok)
	}
	f2, _ := two.lease(r.ctx)
	if f2 <= f1 {
		t.Fatalf("fence %d after takeover, want more than %d", f2, f1)
	}
	// The old holder, unaware, writes with its old fence: refused whole.
	_, err = r.store.Write(r.ctx, archive.Batch{Stream: "reservations/" + tn, Fence: f1, Position: "9999999999999-0"})
	if !errors.Is(err, archive.ErrFenced) {
		t.Fatalf("stale fence: %v, want ErrFenced", err)
	}
	if n, err := one.Once(r.ctx); n != 0 || err != nil {
		t.Fatalf("old holder's round: %d %v", n, err)
	}
	if r.rows(tn) != 2 {
		t.Fatalf("%d rows, want 2", r.rows(tn))
	}
}

// TestArchiveKeepsQueueWhilePostgresIsDown: with PostgreSQL gone a round
// fails, and nothing is trimmed or given a TTL: Redis keeps everything until
// the archive is back. The lag and pending gauges and the readiness warning
// report the backlog.
func TestArchiveKeepsQueueWhilePostgresIsDown(t *testing.T) {
	c := redistest.Start(t).Client(t)
	ex := scripttest.On(t, c)
	srv := pgtest.Start(t)
	st, err := archive.Open(context.Background(), pgtest.NewDatabase(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r := &rig{t: t, ctx: context.Background(), c: c, exec: ex, store: st, led: ledger.New(ex, ledger.Options{Archive: true})}
	const tn = "arc-down"
	r.tenant(tn)
	ids := r.settle(tn, 3)
	// A second tenant's queue holds an entry settled long ago (queue ids
	// are the settle's Redis TIME): the lag is known to be past any bound.
	const old = "arc-down-old"
	r.tenant(old)
	c.XAdd(r.ctx, &redis.XAddArgs{Stream: keys.Tenant(old).ArchiveQueue(), ID: "1000-0", Values: []string{"id", "r_gone"}})
	srv.Kill()
	m := telemetrytest.New()
	// Batches of 1: the next batch is being read ahead when the first
	// write fails; it is discarded, nothing leaves the queue.
	a := r.archiver(ArchiverOptions{MeterProvider: m.Provider, LagWarning: time.Hour, BatchSize: 1})
	if w := a.Warnings(); len(w) != 0 {
		t.Fatalf("warnings before a round: %v", w)
	}
	if _, err := a.Once(r.ctx); err == nil {
		t.Fatal("a round without PostgreSQL succeeded")
	}
	if q := r.queued(tn); q != 3 {
		t.Fatalf("%d queued, want 3", q)
	}
	if p, ok := m.Gauge(t, "cycles.archive.pending"); !ok || p != 4 {
		t.Fatalf("pending gauge %d (%v), want 4", p, ok)
	}
	if lag, ok := m.FloatGauge(t, "cycles.archive.lag"); !ok || lag < 365*24*3600 {
		t.Fatalf("lag gauge %v (%v), want the 1970 entry's age", lag, ok)
	}
	if w := a.Warnings(); len(w) != 1 || !strings.Contains(w[0], "archive lag") {
		t.Fatalf("readiness warnings %v", w)
	}
	for _, id := range ids {
		if ttl := c.PTTL(r.ctx, keys.Tenant(tn).Reservation(id)).Val(); ttl != -1 {
			t.Fatalf("%s: PTTL %v while unarchived", id, ttl)
		}
	}
}

func cut(key string) (tenant, id string, ok bool) {
	for i := 0; i < len(key); i++ {
		if key[i] == '/' {
			return key[:i], key[i+1:], true
		}
	}
	return "", "", false
}

// TestArchiveStreams: a round copies each tenant's event and audit
// entries, and the global audit log's, from the archived position on: each
// row holds the whole entry (id, fields in order) under the entry's own id
// and Redis TIME; the next round copies only what was appended since; the
// streams themselves are left as they are.
func TestArchiveStreams(t *testing.T) {
	const tn = "arc-streams"
	r := newRig(t, tn)
	tk := keys.Tenant(tn)
	add := func(stream string, values ...string) string {
		id, err := r.c.XAdd(r.ctx, &redis.XAddArgs{Stream: stream, Values: values}).Result()
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	type want struct {
		tenant, id, stream, entry string
		values                    []string
	}
	var wants []want
	for i := 0; i < 3; i++ {
		v := []string{"id", fmt.Sprintf("evt_00000000000000%02d", i), "type", "budget.exhausted", "ts", "1",
			"data", "{\"bin\":\"\xff\"}"}
		wants = append(wants, want{tn, v[1], "events", add(tk.Events(), v...), v})
	}
	v := []string{"id", "aud_0a", "t", tn, "op", "release", "st", "200"}
	wants = append(wants, want{tn, "aud_0a", "audit", add(tk.Audit(), v...), v})
	g := []string{"id", "aud_0b", "t", "__unauth__", "op", "auth", "st", "401"}
	wants = append(wants, want{"__unauth__", "aud_0b", "audit", add(keys.AuditLog, g...), g})

	a := r.archiver(ArchiverOptions{BatchSize: 2})
	n, err := a.Once(r.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != 5 {
		t.Fatalf("archived %d rows, want 5", n)
	}
	conn, err := pgx.Connect(r.ctx, r.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(r.ctx)
	for _, w := range wants {
		table, col := "cycles_events", "event_id"
		if w.stream == "audit" {
			table, col = "cycles_audit_entries", "entry_id"
		}
		var body []byte
		var at time.Time
		if err := conn.QueryRow(r.ctx, fmt.Sprintf("SELECT body, occurred_at FROM %s WHERE tenant_id = $1 AND %s = $2", table, col),
			w.tenant, w.id).Scan(&body, &at); err != nil {
			t.Fatalf("%s %s: %v", table, w.id, err)
		}
		sid, pairs, err := DecodeEntry(body)
		if err != nil || sid != w.entry || !slices.Equal(pairs, w.values) {
			t.Fatalf("%s: archived %s %q (%v), want %s %q", w.id, sid, pairs, err, w.entry, w.values)
		}
		if ms, _, _ := script.ParseStreamID(w.entry); at.UnixMilli() != int64(ms) {
			t.Fatalf("%s: occurred_at %v, want the entry's time", w.id, at)
		}
	}
	if n, err := a.Once(r.ctx); n != 0 || err != nil {
		t.Fatalf("second round: %d %v", n, err)
	}
	add(tk.Events(), "id", "evt_0000000000000099", "type", "x")
	if n, err := a.Once(r.ctx); n != 1 || err != nil {
		t.Fatalf("round after one append: %d %v", n, err)
	}
	if l := r.c.XLen(r.ctx, tk.Events()).Val(); l != 4 {
		t.Fatalf("event stream holds %d entries, want all 4 (the archive does not trim it)", l)
	}
}

// TestGetPastHotWindow: once a settled reservation is archived and its
// Redis record gone (the hot window passed), GetReservation answers from
// the archive with the same bytes as from Redis; an archived EXPIRED one is
// refused exactly as before; an id never archived stays NOT_FOUND.
func TestGetPastHotWindow(t *testing.T) {
	const tn = "arc-get"
	r := newRig(t, tn)
	r.led = ledger.New(r.exec, ledger.Options{Archive: true, Archived: Reader{Store: r.store}.Reservation})
	ids := r.settle(tn, 2)
	// An expired one: settled by hand the way the sweeper leaves it.
	expired := ids[1]
	tk := keys.Tenant(tn)
	r.c.HSet(r.ctx, tk.Reservation(expired), "state", "EXPIRED", "expired_at", "1790000000000")
	r.c.HDel(r.ctx, tk.Reservation(expired), "finalized_at")
	get := func(id string) ([]byte, error) {
		res, err := r.led.Get(r.ctx, tn, &cyclesv1.GetReservationRequest{ReservationId: id})
		if err != nil {
			return nil, err
		}
		return proto.MarshalOptions{Deterministic: true}.Marshal(res)
	}
	hot, err := get(ids[0])
	if err != nil {
		t.Fatal(err)
	}
	_, hotErr := get(expired)
	if !apierr.HasCode(hotErr, apierr.ReservationExpired) {
		t.Fatalf("expired in Redis: %v", hotErr)
	}
	a := r.archiver(ArchiverOptions{})
	if n, err := a.Once(r.ctx); err != nil || n != 2 {
		t.Fatalf("archived %d: %v", n, err)
	}
	r.c.Del(r.ctx, tk.Reservation(ids[0]), tk.Reservation(expired)) // the hot window passed
	cold, err := get(ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(hot, cold) {
		t.Fatalf("from the archive\n%x\nfrom Redis\n%x", cold, hot)
	}
	_, coldErr := get(expired)
	if coldErr == nil || coldErr.Error() != hotErr.Error() {
		t.Fatalf("expired from the archive: %v, from Redis: %v", coldErr, hotErr)
	}
	if _, err := get("r_" + tn + "_0123456789abcdef0123456789abcdef"); !apierr.HasCode(err, apierr.NotFound) {
		t.Fatalf("never archived: %v", err)
	}
}
