package archive

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"
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
	at := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC).UnixMilli()
	rows := make([]Entry, benchBatch)
	benchBatches(b, "cycles_feed", func(n int) Batch {
		for i := range rows {
			k := int64(n*benchBatch + i)
			rows[i] = feedEntry(at+k/4, k%4, fmt.Sprintf("tenant-%04d", k%1000))
		}
		return Batch{Stream: "bench-feed", Fence: 1, Position: fmt.Sprint(n), Feed: rows}
	})
}
