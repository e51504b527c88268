package archive

import (
	"context"
	"errors"
	"math"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/cyclesgo/cycles-go/test/pgtest"
)

func open(t *testing.T) *Store {
	t.Helper()
	s, err := Open(context.Background(), pgtest.SharedDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func count(t *testing.T, s *Store, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := s.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

var day0 = time.Date(2026, 11, 25, 13, 4, 5, 123e6, time.UTC)

func res(tenant, id string, at time.Time) Reservation {
	return Reservation{TenantID: tenant, ReservationID: id, SettledAt: at, State: StateCommitted,
		Unit: "USD_MICROCENTS", ScopePath: "tenant:" + tenant + "/workspace:w", Estimate: 100, CreatedAtMs: at.UnixMilli() - 5,
		ExpiresAtMs: at.UnixMilli() + 60000}
}

// TestMigrate: a fresh database gets every migration once; replicas
// starting together apply it once; a newer schema is refused.
func TestMigrate(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.SharedDatabase(t)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			s, err := Open(ctx, dsn)
			if err == nil {
				s.Close()
			}
			errs[i] = err
		}(i)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("concurrent open: %v", err)
		}
	}
	s, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if v, err := s.SchemaVersion(ctx); err != nil || v != LatestVersion() || v < 1 {
		t.Fatalf("schema version %d (%v), want %d", v, err, LatestVersion())
	}
	if n := count(t, s, "SELECT count(*) FROM cycles_schema_versions"); n != int64(LatestVersion()) {
		t.Fatalf("%d version rows, want %d", n, LatestVersion())
	}
	if _, err := s.pool.Exec(ctx, "INSERT INTO cycles_schema_versions (version, name) VALUES (999, 'future')"); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, dsn); err == nil {
		t.Fatal("a schema newer than this build was accepted")
	}
}

// TestWriteExactlyOnce: re-writing batches (a crash after the commit, before
// the writer learnt of it) inserts nothing twice, and the position moves
// with the rows.
func TestWriteExactlyOnce(t *testing.T) {
	ctx := context.Background()
	s := open(t)
	b := Batch{Stream: "s1", Fence: 1, Position: "10-0",
		Reservations: []Reservation{res("a", "r1", day0), res("a", "r2", day0.Add(24*time.Hour)), res("b", "r1", day0)},
		Events:       []Entry{{TenantID: "a", ID: "e1", OccurredAt: day0, Body: []byte(`{"x":1}`)}},
		Audit:        []Entry{{TenantID: "a", ID: "u1", OccurredAt: day0, Body: []byte(`{}`)}},
		Feed:         []Entry{{TenantID: "a", OccurredAt: day0, Seq: 3, Body: []byte(`{}`)}},
	}
	for i, want := range []Written{{3, 1, 1, 1}, {0, 0, 0, 0}} {
		w, err := s.Write(ctx, b)
		if err != nil || w != want {
			t.Fatalf("write %d: %+v %v, want %+v", i, w, err, want)
		}
	}
	if p, err := s.Position(ctx, "s1"); err != nil || p != (Position{"10-0", 1}) {
		t.Fatalf("position %+v %v", p, err)
	}
	if n := count(t, s, "SELECT count(*) FROM cycles_reservations"); n != 3 {
		t.Fatalf("%d reservation rows, want 3", n)
	}
	if n := count(t, s, "SELECT count(*) FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = 'cycles_reservations'"); n != 2 {
		t.Fatalf("%d day partitions, want 2", n)
	}
}

// TestFence: once a newer lease holder wrote a stream, the older one's
// batch is refused whole.
func TestFence(t *testing.T) {
	ctx := context.Background()
	s := open(t)
	if _, err := s.Write(ctx, Batch{Stream: "s", Fence: 2, Position: "5"}); err != nil {
		t.Fatal(err)
	}
	_, err := s.Write(ctx, Batch{Stream: "s", Fence: 1, Position: "9", Reservations: []Reservation{res("a", "late", day0)}})
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("stale writer: %v", err)
	}
	if n := count(t, s, "SELECT count(*) FROM cycles_reservations"); n != 0 {
		t.Fatalf("refused batch left %d rows", n)
	}
	if p, _ := s.Position(ctx, "s"); p != (Position{"5", 2}) {
		t.Fatalf("position moved to %+v", p)
	}
	if _, err := s.Write(ctx, Batch{Stream: "s", Fence: 3, Position: "9"}); err != nil {
		t.Fatalf("newer fence: %v", err)
	}
}

// TestRoundTrip: every field comes back as written, money at the int64
// edges included.
func TestRoundTrip(t *testing.T) {
	ctx := context.Background()
	s := open(t)
	charged := int64(math.MaxInt64)
	full := Reservation{TenantID: "t", ReservationID: "r-full", SettledAt: day0, State: StateReleased, Unit: "TOKENS",
		ScopePath: "tenant:t/app:x", Estimate: math.MaxInt64, Charged: &charged, DebtIncurred: math.MinInt64,
		CreatedAtMs: 1, ExpiresAtMs: 2, GraceMs: 3, ExtCount: 4, MaxExt: 5, Policy: "ALLOW_WITH_OVERDRAFT",
		IdemKey: "k", Subject: `{"tenant":"t"}`, Action: `{"kind":"llm.completion"}`, Affected: `["tenant:t"]`,
		Budgeted: "1", Metadata: "m", CommittedMetadata: "cm", Replay: []byte{0, 1, 2}}
	bare := res("t", "r-bare", day0)
	bare.State = StateExpired
	canonical := res("t", "r_t_0123456789abcdef0123456789abcdef", day0)
	upper := res("t", "r_t_0123456789ABCDEF0123456789ABCDEF", day0)
	otherTenant := res("t", "r_u_0123456789abcdef0123456789abcdef", day0)
	tests := []struct {
		name string
		in   Reservation
	}{
		{"every field", full}, {"nil charged, empty strings", bare},
		{"canonical id (stored as 16 bytes)", canonical}, {"upper-case hex: kept whole", upper},
		{"another tenant's prefix: kept whole", otherTenant},
	}
	for _, tc := range tests {
		if _, err := s.Write(ctx, Batch{Stream: "x", Fence: 1, Reservations: []Reservation{tc.in}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok, err := s.GetReservation(ctx, tc.in.TenantID, tc.in.ReservationID)
			if err != nil || !ok {
				t.Fatalf("get: %v %v", ok, err)
			}
			if !reflect.DeepEqual(got, tc.in) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.in)
			}
		})
	}
	if _, ok, err := s.GetReservation(ctx, "other", "r-full"); ok || err != nil {
		t.Fatalf("another tenant read it: %v %v", ok, err)
	}
}

// TestBadRows: a row without tenant, id or time is refused whole.
func TestBadRows(t *testing.T) {
	ctx := context.Background()
	s := open(t)
	tests := []struct {
		name string
		b    Batch
	}{
		{"no stream", Batch{}},
		{"no tenant", Batch{Stream: "s", Reservations: []Reservation{res("", "r", day0)}}},
		{"no id", Batch{Stream: "s", Reservations: []Reservation{res("a", "", day0)}}},
		{"no time", Batch{Stream: "s", Reservations: []Reservation{{TenantID: "a", ReservationID: "r"}}}},
		{"event without body", Batch{Stream: "s", Events: []Entry{{TenantID: "a", ID: "e", OccurredAt: day0}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := s.Write(ctx, tc.b); err == nil {
				t.Fatal("accepted")
			}
		})
	}
	if n := count(t, s, "SELECT count(*) FROM cycles_archive_positions WHERE position <> ''"); n != 0 {
		t.Fatalf("a refused batch moved %d positions", n)
	}
}

// TestRetention: DropBefore removes whole days older than the cutoff, in
// every table, and keeps the rest.
func TestRetention(t *testing.T) {
	ctx := context.Background()
	s := open(t)
	if err := s.EnsureDays(ctx, day0.AddDate(0, 0, -3), day0.AddDate(0, 0, 1)); err != nil {
		t.Fatal(err)
	}
	old, kept := res("a", "old", day0.AddDate(0, 0, -3)), res("a", "kept", day0.AddDate(0, 0, -1))
	if _, err := s.Write(ctx, Batch{Stream: "s", Fence: 1, Reservations: []Reservation{old, kept}}); err != nil {
		t.Fatal(err)
	}
	// Cutoff inside day -1: days -3 and -2 are wholly older, -1 is not.
	dropped, err := s.DropBefore(ctx, day0.AddDate(0, 0, -1).Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(dropped) != 2*len(historyTables) {
		t.Fatalf("dropped %v", dropped)
	}
	if _, ok, _ := s.GetReservation(ctx, "a", "old"); ok {
		t.Fatal("a row of a dropped day is still there")
	}
	if _, ok, _ := s.GetReservation(ctx, "a", "kept"); !ok {
		t.Fatal("a row inside the retention was dropped")
	}
	// A dropped day is recreated when a late batch needs it.
	if _, err := s.Write(ctx, Batch{Stream: "s", Fence: 1, Reservations: []Reservation{old}}); err != nil {
		t.Fatalf("rewrite into a dropped day: %v", err)
	}
}
