package sweeper

import (
	"testing"

	"github.com/cyclesgo/cycles-go/test/redistest"
)

// TestExpireQueuesForArchive: with an archive configured, an expired record
// joins the tenant's archive queue and keeps no TTL until the archiver has
// stored it; without one it gets the terminal retention and nothing is
// queued. Through the Sweeper, so its Archive option reaches the script.
func TestExpireQueuesForArchive(t *testing.T) {
	for _, archive := range []bool{false, true} {
		name := "no archive"
		if archive {
			name = "archive"
		}
		t.Run(name, func(t *testing.T) {
			c := redistest.SharedClient(t)
			s := seedDue(t, c, 3, 10)
			sw := New(s.ex, Options{Archive: archive})
			got, _, err := sw.drain(s.ctx, s.tenant, false, false)
			if err != nil {
				t.Fatal(err)
			}
			if got.Expired != 3 {
				t.Fatalf("expired %d, want 3", got.Expired)
			}
			queue, err := c.XRange(s.ctx, s.k.ArchiveQueue(), "-", "+").Result()
			if err != nil {
				t.Fatal(err)
			}
			queued := map[string]bool{}
			for _, m := range queue {
				queued[m.Values["id"].(string)] = true
			}
			for _, id := range s.ids {
				ttl := c.PTTL(s.ctx, s.k.Reservation(id)).Val()
				switch {
				case archive && (ttl != -1 || !queued[id]):
					t.Fatalf("%s: PTTL %v, queued %v; want no TTL and queued", id, ttl, queued[id])
				case !archive && (ttl <= 0 || queued[id]):
					t.Fatalf("%s: PTTL %v, queued %v; want the terminal retention, not queued", id, ttl, queued[id])
				}
			}
			if archive && len(queue) != 3 {
				t.Fatalf("queue holds %d entries, want 3", len(queue))
			}
		})
	}
}
