package archive

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/cyclesgo/cycles-go/test/pgtest"
)

// feedEntry is a feed entry as the archiver stores it (the Redis entry:
// stream id, then t/from/to, each length-prefixed): tenant's events after
// from up to to, announced at ms-seq.
func feedEntry(ms, seq int64, tenant string) Entry {
	var body []byte
	for _, p := range []string{fmt.Sprintf("%d-%d", ms, seq), "t", tenant,
		"from", fmt.Sprintf("%d-%d", ms-40, 3), "to", fmt.Sprintf("%d-%d", ms-2, 11)} {
		body = binary.AppendUvarint(body, uint64(len(p)))
		body = append(body, p...)
	}
	return Entry{TenantID: tenant, OccurredAt: time.UnixMilli(ms).UTC(), Seq: seq, Body: body}
}

// BenchmarkWriteFeed archives batches of 1,000 all-tenant feed entries (one
// per tenant and announcer flush) and reports the rate and PostgreSQL's
// bytes per entry (table plus primary key). Figures: BENCHMARKS.md#archive.
func BenchmarkWriteFeed(b *testing.B) {
	ctx := context.Background()
	s, err := Open(ctx, pgtest.SharedDatabase(b))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const batch = 1000
	at := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC).UnixMilli()
	rows := make([]Entry, batch)
	b.ResetTimer()
	start := time.Now()
	for n := 0; n < b.N; n++ {
		for i := range rows {
			k := int64(n*batch + i)
			rows[i] = feedEntry(at+k/4, k%4, fmt.Sprintf("tenant-%04d", k%1000))
		}
		if _, err := s.Write(ctx, Batch{Stream: "bench-feed", Fence: 1, Position: fmt.Sprint(n), Feed: rows}); err != nil {
			b.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N*batch)/elapsed.Seconds(), "rows/s")
	if _, err := s.pool.Exec(ctx, "VACUUM ANALYZE cycles_feed"); err != nil {
		b.Fatal(err)
	}
	var total, count int64
	if err := s.pool.QueryRow(ctx, `SELECT coalesce(sum(pg_total_relation_size(i.inhrelid)), 0),
		(SELECT count(*) FROM cycles_feed) FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent
		WHERE p.relname = 'cycles_feed'`).Scan(&total, &count); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(total)/float64(count), "pg-bytes/row")
}
