package archive

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cyclesgo/cycles-go/test/pgtest"
)

// typical is a settled reservation shaped like the bench's: a tenant of 4
// characters, a 4-level scope path, an idempotency key, the subject's stored
// form and a commit reply kept for replays.
func typical(i int, at time.Time) Reservation {
	charged := int64(9_000 + i%1000)
	return Reservation{
		TenantID: "acme", ReservationID: fmt.Sprintf("r_acme_%032x", i), SettledAt: at, State: StateCommitted,
		Unit: "USD_MICROCENTS", ScopePath: "tenant:acme/workspace:prod/app:chatbot/agent:a-17", Estimate: 10_000,
		Charged: &charged, CreatedAtMs: at.UnixMilli() - 800, ExpiresAtMs: at.UnixMilli() + 59_200,
		Policy: "REJECT", IdemKey: fmt.Sprintf("commit-%08d", i), Subject: "workspace=prod;app=chatbot;agent=a-17",
		Action: "llm.completion/gpt-4o",
		Replay: []byte(fmt.Sprintf(`{"status":"COMMITTED","charged":{"unit":"USD_MICROCENTS","amount":%d}}`, charged)),
	}
}

// BenchmarkWrite archives batches of 1,000 typical settled reservations and
// reports the rate and PostgreSQL's bytes per row (table plus indexes).
// Figures: BENCHMARKS.md#archive.
func BenchmarkWrite(b *testing.B) {
	b.Run("reply-stored", func(b *testing.B) { benchWrite(b, true) })
	b.Run("reply-rendered", func(b *testing.B) { benchWrite(b, false) })
}

// benchWrite is BenchmarkWrite with or without the stored commit reply
// (withReply false: replays re-rendered from the row's fields).
func benchWrite(b *testing.B, withReply bool) {
	at := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	rows := make([]Reservation, benchBatch)
	benchBatches(b, "cycles_reservations", func(n int) Batch {
		for i := range rows {
			rows[i] = typical(n*benchBatch+i, at.Add(time.Duration(n*benchBatch+i)*time.Millisecond))
			if !withReply {
				rows[i].Replay = nil
			}
		}
		return Batch{Stream: "bench", Fence: 1, Position: fmt.Sprint(n), Reservations: rows}
	})
}

// benchBatch is the rows of one batch the write benchmarks archive.
const benchBatch = 1000

// benchBatches archives b.N batches of benchBatch rows, batch(n) making the
// n-th, and reports the rate and the bytes per row PostgreSQL holds in the
// partitions of table: with indexes (pg-bytes/row) and without
// (heap-bytes/row).
func benchBatches(b *testing.B, table string, batch func(n int) Batch) {
	ctx := context.Background()
	s, err := Open(ctx, pgtest.SharedDatabase(b))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	b.ResetTimer()
	start := time.Now()
	for n := 0; n < b.N; n++ {
		if _, err := s.Write(ctx, batch(n)); err != nil {
			b.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N*benchBatch)/elapsed.Seconds(), "rows/s")
	if _, err := s.pool.Exec(ctx, "VACUUM ANALYZE "+table); err != nil {
		b.Fatal(err)
	}
	var total, heap, count int64
	if err := s.pool.QueryRow(ctx, `SELECT coalesce(sum(pg_total_relation_size(i.inhrelid)), 0),
		coalesce(sum(pg_table_size(i.inhrelid)), 0),
		(SELECT count(*) FROM `+table+`) FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent
		WHERE p.relname = $1`, table).Scan(&total, &heap, &count); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(total)/float64(count), "pg-bytes/row")
	b.ReportMetric(float64(heap)/float64(count), "heap-bytes/row")
}
