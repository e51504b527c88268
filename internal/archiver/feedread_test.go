package archiver

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/events"
	"github.com/cyclesgo/cycles-go/internal/keys"
)

// announceRound appends n events to each tenant's log and announces them to
// the all-tenant feed (one feed entry per tenant), as a flush after a round
// of script runs does.
func (r *rig) announceRound(ann *events.Announcer, tenants []string, n int) {
	r.t.Helper()
	for _, tn := range tenants {
		r.appendEvents(tn, n)
		last := r.c.XRevRangeN(r.ctx, keys.Tenant(tn).Events(), "+", "-", 1).Val()
		ann.Observe(tn, last[0].ID)
	}
	if err := ann.Flush(r.ctx); err != nil {
		r.t.Fatal(err)
	}
}

// listFeed pages the all-tenant ListEvents (admin, no tenant_id) to its end.
func listFeed(t *testing.T, svc *events.Service, req *cyclesv1.ListEventsRequest) [][]byte {
	t.Helper()
	req = proto.Clone(req).(*cyclesv1.ListEventsRequest)
	return readPages(t, "all-tenant listing", req.GetCursor(), func(cursor string) ([][]byte, string, bool, error) {
		req.Cursor = cursor
		res, err := svc.List(t.Context(), auth.Principal{Admin: true}, req)
		return marshalAll(t, res.GetEvents()), res.GetNextCursor(), res.GetHasMore(), err
	})
}

// TestFeedPastRetention: the all-tenant feed (admin WatchEvents and
// ListEvents without tenant_id) gives the same events with the same bytes,
// feed cursors included, while feed and logs are whole in Redis, once
// archived, once Redis retention trimmed the feed's and the logs' older
// parts (the reads walk the archived feed order, then Redis's) and once
// Redis holds none of them; a watch resumed from any event's cursor gets
// exactly the events after it, a cursor in the archived part goes on into
// Redis and the live tail, and a watch from NOW replays nothing.
func TestFeedPastRetention(t *testing.T) {
	tenants := []string{"arc-feed-a", "arc-feed-b", "arc-feed-c"}
	r := newRig(t, tenants...)
	ann := events.NewAnnouncer(r.exec, events.AnnouncerOptions{})
	for round := 0; round < 4; round++ {
		r.announceRound(ann, tenants[:1+round%3], 1+round%2)
	}
	rd := Reader{Store: r.store}
	svc := func(batch int) *events.Service {
		return events.New(r.exec, events.Options{ArchivedStream: rd.Stream, ArchivedEvent: rd.Event, ReadBatch: batch,
			Heartbeat: 30 * time.Millisecond, ArchiveRetention: 400 * 24 * time.Hour, FeedBlock: 20 * time.Millisecond,
			FeedStreamEventsPerSecond: -1, FeedEventsPerSecond: -1})
	}
	plain := events.New(r.exec, events.Options{Heartbeat: 30 * time.Millisecond, FeedBlock: 20 * time.Millisecond,
		FeedStreamEventsPerSecond: -1, FeedEventsPerSecond: -1})
	earliest := &cyclesv1.WatchEventsRequest{Start: cyclesv1.StartPosition_START_POSITION_EARLIEST}
	golden := watchUntilHeartbeat(t, plain, earliest, nil)
	if golden.err != nil || len(golden.events) < 8 {
		t.Fatalf("golden feed watch: %d events, %v", len(golden.events), golden.err)
	}
	sameBytes(t, "golden listing", listFeed(t, plain, &cyclesv1.ListEventsRequest{Limit: 3}), golden.events)
	check := func(stage string) {
		t.Helper()
		for _, batch := range []int{1, 2, 32} {
			s := svc(batch)
			w := watchUntilHeartbeat(t, s, earliest, nil)
			if w.err != nil {
				t.Fatalf("%s, batch %d, from the start: %v", stage, batch, w.err)
			}
			sameBytes(t, stage+", from the start", w.events, golden.events)
			for k, c := range golden.cursors {
				w := watchUntilHeartbeat(t, s, &cyclesv1.WatchEventsRequest{Start: cyclesv1.StartPosition_START_POSITION_CURSOR, Cursor: c}, nil)
				if w.err != nil {
					t.Fatalf("%s, batch %d, after event %d: %v", stage, batch, k, w.err)
				}
				sameBytes(t, stage+", resumed", w.events, golden.events[k+1:])
			}
			if w := watchUntilHeartbeat(t, s, &cyclesv1.WatchEventsRequest{}, nil); w.err != nil || len(w.events) != 0 {
				t.Fatalf("%s, batch %d, from now: %d events replayed, %v", stage, batch, len(w.events), w.err)
			}
			for _, limit := range []int32{1, 3, 50} {
				sameBytes(t, stage+", listed", listFeed(t, s, &cyclesv1.ListEventsRequest{Limit: limit}), golden.events)
			}
			sameBytes(t, stage+", listed from a cursor", listFeed(t, s, &cyclesv1.ListEventsRequest{Limit: 2, Cursor: golden.cursors[2]}),
				golden.events[3:])
		}
	}
	check("in Redis only")
	a := r.archiver(ArchiverOptions{}) // one archiver: it holds the lease
	if _, err := a.Once(r.ctx); err != nil {
		t.Fatal(err)
	}
	check("archived, still in Redis")
	r.c.XTrimMaxLen(r.ctx, keys.Feed, 2) // retention trimmed the older part
	for _, tn := range tenants {
		r.c.XTrimMaxLen(r.ctx, keys.Tenant(tn).Events(), 1)
	}
	check("older parts trimmed")

	// Resumed in the archived part, a watch goes on into Redis and the
	// live tail: a round announced while it runs arrives once.
	added := 0
	live := watchUntil(t, svc(2), &cyclesv1.WatchEventsRequest{Start: cyclesv1.StartPosition_START_POSITION_CURSOR, Cursor: golden.cursors[1]},
		func(n int) {
			if n == 1 {
				r.announceRound(ann, tenants[1:], 2)
				added = 4
			}
		}, func() int { return len(golden.events) - 2 + added })
	if live.err != nil {
		t.Fatal(live.err)
	}
	all := watchUntilHeartbeat(t, svc(32), earliest, nil)
	sameGrown(t, "feed", all, live, golden, added)

	if _, err := a.Once(r.ctx); err != nil {
		t.Fatal(err)
	}
	r.c.Del(r.ctx, keys.Feed)
	for _, tn := range tenants {
		r.c.Del(r.ctx, keys.Tenant(tn).Events())
	}
	golden = all
	check("none left in Redis")
}
