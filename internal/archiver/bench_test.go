package archiver

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"maps"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/archive"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/ledger"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
	"github.com/cyclesgo/cycles-go/test/pgtest"
	"github.com/cyclesgo/cycles-go/test/redistest"
	"github.com/cyclesgo/cycles-go/test/scripttest"
)

// BenchmarkArchive measures the end-to-end archive rate: b.N x 1,000
// settled reservations queued in Redis (a backlog, as after a PostgreSQL
// outage: clones of one record committed through the ledger on a 4-level
// scope, with random ids and per-record times, keys and hashes) are
// drained by one round (Redis read, PostgreSQL write with the
// position, Redis PEXPIRE and queue trim), at batches of 500 (the
// default) and 1,000.
// It reports rows/s and PostgreSQL bytes per archived reservation (table
// plus indexes, after VACUUM ANALYZE). Figures: BENCHMARKS.md.
func BenchmarkArchive(b *testing.B) {
	for _, batch := range []int{DefaultArchiverOptions().BatchSize, MaxBatchSize} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) { benchArchive(b, batch) })
	}
}

func benchArchive(b *testing.B, batch int) {
	ctx := context.Background()
	c := redistest.Start(b).Client(b)
	ex := scripttest.On(b, c)
	dsn := pgtest.SharedDatabase(b)
	st, err := archive.Open(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	const tn = benchTenant
	seedBenchTenant(b, c, 1<<40)
	led := ledger.New(ex, ledger.Options{Archive: true})
	res, err := led.Reserve(ctx, tn, benchReserve("bench-reserve-0001"))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := led.Commit(ctx, tn, benchCommit(res.GetReservationId(), "bench-commit-0001")); err != nil {
		b.Fatal(err)
	}
	tk := keys.Tenant(tn)
	model := c.HGetAll(ctx, tk.Reservation(res.GetReservationId())).Val()
	c.Del(ctx, tk.ArchiveQueue(), tk.Reservation(res.GetReservationId()))
	n := b.N * 1000
	created, _ := strconv.ParseInt(model["created_at"], 10, 64)
	for lo := 0; lo < n; lo += 1000 {
		p := c.Pipeline()
		for i := lo; i < lo+1000; i++ {
			// Random ids and times, keys and hashes that differ per record,
			// as real traffic gives them: the indexes neither compress
			// repeated keys nor get sequential inserts they would not get.
			var rnd [16]byte
			_, _ = rand.Read(rnd[:])
			id := fmt.Sprintf("r_acme_%x", rnd)
			at := created + int64(i)/3
			rec := maps.Clone(model)
			rec["created_at"] = strconv.FormatInt(at, 10)
			rec["expires_at"] = strconv.FormatInt(at+60_000, 10)
			rec["finalized_at"] = strconv.FormatInt(at+1_500, 10)
			rec["idem_key"] = fmt.Sprintf("bench-reserve-%08d", i)
			rec["commit_key"] = fmt.Sprintf("bench-commit-%08d", i)
			rec["commit_hash"] = base64.RawURLEncoding.EncodeToString(rnd[:])
			p.HSet(ctx, tk.Reservation(id), rec)
			p.XAdd(ctx, &redis.XAddArgs{Stream: tk.ArchiveQueue(), Values: []string{"id", id}})
		}
		if _, err := p.Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}
	a, err := New(ex, st, ArchiverOptions{HotRetention: time.Hour, BatchSize: batch})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	got, err := a.Once(ctx)
	elapsed := time.Since(start)
	b.StopTimer()
	if err != nil || got != int64(n) {
		b.Fatalf("archived %d of %d: %v", got, n, err)
	}
	b.ReportMetric(float64(n)/elapsed.Seconds(), "rows/s")
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "VACUUM ANALYZE cycles_reservations"); err != nil {
		b.Fatal(err)
	}
	var total, count int64
	if err := conn.QueryRow(ctx, `SELECT coalesce(sum(pg_total_relation_size(i.inhrelid)), 0),
		(SELECT count(*) FROM cycles_reservations) FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent
		WHERE p.relname = 'cycles_reservations'`).Scan(&total, &count); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(total)/float64(count), "pg-bytes/row")
	row, err := RowOf(tn, "r_acme_00000000000000000000000000000000", model, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(len(row.Replay)), "replay-bytes/row")
}

// The archive benchmarks' tenant: one budget on a four-level scope, settled
// with the same reserve and commit (estimate 10,000, actual 9,000).
const benchTenant = "acme"

func seedBenchTenant(b *testing.B, c redis.UniversalClient, allocated int64) {
	b.Helper()
	ledgertest.SeedTenant(b, c, benchTenant, ledgertest.Tenant{})
	ledgertest.SeedBudget(b, c, benchTenant, ledgertest.Budget{Scope: "tenant:acme/workspace:prod/app:chatbot/agent:a-17",
		Unit: "USD_MICROCENTS", Allocated: allocated})
}

func benchReserve(key string) *cyclesv1.CreateReservationRequest {
	return &cyclesv1.CreateReservationRequest{IdempotencyKey: key,
		Subject:  &cyclesv1.Subject{Workspace: "prod", App: "chatbot", Agent: "a-17"},
		Action:   &cyclesv1.Action{Kind: "llm.completion", Name: "gpt-4o"},
		Estimate: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_USD_MICROCENTS, Amount: 10_000}}
}

func benchCommit(id, key string) *cyclesv1.CommitReservationRequest {
	return &cyclesv1.CommitReservationRequest{ReservationId: id, IdempotencyKey: key,
		Actual: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_USD_MICROCENTS, Amount: 9_000}}
}
