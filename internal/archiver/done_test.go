package archiver

import (
	"slices"
	"testing"
	"time"

	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/keys"
)

// TestDoneTrimsUpToTheBatch: archive/done removes a batch's entries (the
// queue up to its last entry, one trim instead of an XDEL per entry) and
// starts the TTL of its records only: later entries and their records stay
// as they are, whatever the batch; finishing a batch again changes nothing;
// a malformed entry id is refused before anything is written.
func TestDoneTrimsUpToTheBatch(t *testing.T) {
	const tn = "arc-done"
	r := newRig(t, tn)
	ids := r.settle(tn, 6)
	tk := keys.Tenant(tn)
	b, err := r.archiver(ArchiverOptions{}).read(r.ctx, tk, "", 6, true)
	if err != nil || len(b.entries) != 6 {
		t.Fatalf("queue read: %d entries, %v", len(b.entries), err)
	}
	a := r.archiver(ArchiverOptions{HotRetention: time.Hour})
	for _, c := range []struct {
		name    string
		batch   []queued
		refused bool
		queued  []string // reservation ids still queued after
		ttl     int      // records 0..ttl-1 have a TTL, the others none
	}{
		{name: "malformed id", batch: []queued{b.entries[0], {qid: "x", rid: ids[1], fields: b.entries[1].fields}}, refused: true,
			queued: ids, ttl: 0},
		{name: "first two", batch: b.entries[:2], queued: ids[2:], ttl: 2},
		{name: "again", batch: b.entries[:2], queued: ids[2:], ttl: 2},
		{name: "next three", batch: b.entries[2:5], queued: ids[5:], ttl: 5},
		{name: "last", batch: b.entries[5:], queued: nil, ttl: 6},
	} {
		err := a.done(r.ctx, tk, c.batch)
		if refused := apierr.CodeOf(err) == apierr.InvalidRequest; refused != c.refused || (err != nil && !c.refused) {
			t.Fatalf("%s: %v", c.name, err)
		}
		var left []string
		for _, e := range r.c.XRange(r.ctx, tk.ArchiveQueue(), "-", "+").Val() {
			left = append(left, e.Values["id"].(string))
		}
		if !slices.Equal(left, c.queued) {
			t.Fatalf("%s: queued %v, want %v", c.name, left, c.queued)
		}
		for i, id := range ids {
			ttl := r.c.PTTL(r.ctx, tk.Reservation(id)).Val()
			if has := ttl > 0; has != (i < c.ttl) {
				t.Fatalf("%s: record %d has PTTL %v", c.name, i, ttl)
			}
		}
	}
}
