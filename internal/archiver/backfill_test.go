package archiver

import (
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestSeqBackfill: the expression migration 0002 fills seq with, for rows
// written before it, reads the sequence of the body's stream id.
func TestSeqBackfill(t *testing.T) {
	r := newRig(t)
	conn, err := pgx.Connect(r.ctx, r.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(r.ctx)
	for _, tc := range []struct {
		id   string
		want int64
	}{{"1790000000000-0", 0}, {"1790000000000-7", 7}, {"1-123456789012", 123456789012}} {
		body := EncodeEntry(tc.id, []string{"id", "evt_x", "type", "budget.funded"})
		var got int64
		if err := conn.QueryRow(r.ctx, `SELECT split_part(convert_from(substring($1::bytea FROM 2 FOR get_byte($1::bytea, 0)), 'UTF8'), '-', 2)::bigint`,
			body).Scan(&got); err != nil || got != tc.want {
			t.Fatalf("%s: seq %d (%v), want %d", tc.id, got, err, tc.want)
		}
	}
}
