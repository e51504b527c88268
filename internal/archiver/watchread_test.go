package archiver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/archive"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/events"
	"github.com/cyclesgo/cycles-go/internal/keys"
)

// watched is what one watch delivered up to its first heartbeat: a
// heartbeat is sent only once the watch has read everything there is, so
// the events before it are the whole answer, and a repeat or a gap shows.
type watched struct {
	events  [][]byte // marshalled, cursor included
	cursors []string
	err     error // the watch's own end, when it ended before a heartbeat
}

// watchUntilHeartbeat runs svc.Watch until its first heartbeat (or its
// end); onEvent, when set, runs after each event is received. A guard
// deadline turns a hang into a failure.
func watchUntilHeartbeat(t *testing.T, svc *events.Service, req *cyclesv1.WatchEventsRequest, onEvent func(n int)) watched {
	t.Helper()
	return watchUntil(t, svc, req, onEvent, func() int { return 0 })
}

// watchUntil is watchUntilHeartbeat ignoring the heartbeats that come
// before atLeast() events (a live tail still being appended).
func watchUntil(t *testing.T, svc *events.Service, req *cyclesv1.WatchEventsRequest, onEvent func(n int), atLeast func() int) watched {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	guard := time.AfterFunc(time.Minute, cancel)
	defer guard.Stop()
	var out watched
	heartbeat := errors.New("heartbeat")
	err := svc.Watch(ctx, auth.Principal{Admin: true}, req, func(res *cyclesv1.WatchEventsResponse) error {
		if res.GetHeartbeat() != nil {
			if len(out.events) < atLeast() {
				return nil
			}
			return heartbeat
		}
		ev := res.GetEvent()
		out.events = append(out.events, marshal(t, ev))
		out.cursors = append(out.cursors, ev.GetCursor())
		if onEvent != nil {
			onEvent(len(out.events))
		}
		return nil
	})
	if ctx.Err() != nil {
		t.Fatal("watch hung: no heartbeat within a minute")
	}
	if !errors.Is(err, heartbeat) {
		out.err = err
	}
	return out
}

// appendEvents appends n events to tenant's log as the scripts write them
// (emit_event: stream ids by Redis TIME, so several share a millisecond).
func (r *rig) appendEvents(tenant string, n int) {
	r.t.Helper()
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("evt_%s_%016x", tenant, rand.Uint64())
		if err := r.c.XAdd(r.ctx, &redis.XAddArgs{Stream: keys.Tenant(tenant).Events(), Values: []string{"id", id,
			"type", "reservation.denied", "cat", "reservation", "ts", fmt.Sprint(time.Now().UnixMilli()), "scope", "tenant:" + tenant,
			"actor", "api_key", "key_id", "0123456789abcdef", "src", "cyclesd", "req", fmt.Sprintf("req-%d", i),
			"data", fmt.Sprintf(`{"reason_code":"BUDGET_EXCEEDED","requested":{"unit":"TOKENS","amount":%d}}`, 9_007_199_254_740_993+int64(i))}}).Err(); err != nil {
			r.t.Fatal(err)
		}
	}
}

// sameGrown checks all, a watch from the start once added events joined
// the golden ones: golden's bytes first, then live (resumed after golden's
// second event) delivering everything after those two, each once.
func sameGrown(t *testing.T, log string, all, live, golden watched, added int) {
	t.Helper()
	if len(all.events) != len(golden.events)+added {
		t.Fatalf("after %d more events the %s has %d, want %d", added, log, len(all.events), len(golden.events)+added)
	}
	sameBytes(t, "from the start, grown", all.events[:len(golden.events)], golden.events)
	sameBytes(t, "resumed in the archive, then live", live.events, all.events[2:])
}

// sameBytes fails unless got holds want's items (events, audit entries),
// byte for byte and in order.
func sameBytes(t *testing.T, what string, got, want [][]byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d items, want %d", what, len(got), len(want))
	}
	for i := range got {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("%s: item %d differs\n got %x\nwant %x", what, i, got[i], want[i])
		}
	}
}

// TestWatchPastRetention: a WatchEvents from the start, or resumed from any
// event's cursor, delivers the same events with the same bytes (cursors
// included) while the log is whole in Redis, once archived, once Redis
// retention trimmed its older part (the watch reads the archive, then goes
// on in Redis) and once Redis holds none of it; a watch from NOW replays
// nothing; a watch resumed in the archived part continues into events
// appended live, each once. Small read batches make the reads straddle the
// two stores.
func TestWatchPastRetention(t *testing.T) {
	const tn = "arc-watchread"
	r := newRig(t, tn)
	r.appendEvents(tn, 11)
	stream := keys.Tenant(tn).Events()
	rd := Reader{Store: r.store}
	svc := func(batch int) *events.Service {
		return events.New(r.exec, events.Options{ArchivedStream: rd.Stream, ArchivedEvent: rd.Event, ReadBatch: batch,
			Heartbeat: 30 * time.Millisecond, PollInterval: 10 * time.Millisecond, ArchiveRetention: 400 * 24 * time.Hour,
			StreamEventsPerSecond: -1, TenantEventsPerSecond: -1})
	}
	plain := events.New(r.exec, events.Options{Heartbeat: 30 * time.Millisecond, StreamEventsPerSecond: -1, TenantEventsPerSecond: -1})
	golden := watchUntilHeartbeat(t, plain, &cyclesv1.WatchEventsRequest{TenantId: tn, Start: cyclesv1.StartPosition_START_POSITION_EARLIEST}, nil)
	if golden.err != nil || len(golden.events) < 8 {
		t.Fatalf("golden watch: %d events, %v", len(golden.events), golden.err)
	}
	check := func(stage string) {
		t.Helper()
		for _, batch := range []int{2, 3, 32} {
			s := svc(batch)
			w := watchUntilHeartbeat(t, s, &cyclesv1.WatchEventsRequest{TenantId: tn, Start: cyclesv1.StartPosition_START_POSITION_EARLIEST}, nil)
			if w.err != nil {
				t.Fatalf("%s, batch %d, from the start: %v", stage, batch, w.err)
			}
			sameBytes(t, stage+", from the start", w.events, golden.events)
			for k, c := range golden.cursors {
				w := watchUntilHeartbeat(t, s, &cyclesv1.WatchEventsRequest{TenantId: tn, Start: cyclesv1.StartPosition_START_POSITION_CURSOR, Cursor: c}, nil)
				if w.err != nil {
					t.Fatalf("%s, batch %d, after event %d: %v", stage, batch, k, w.err)
				}
				sameBytes(t, stage+", resumed", w.events, golden.events[k+1:])
			}
			if w := watchUntilHeartbeat(t, s, &cyclesv1.WatchEventsRequest{TenantId: tn}, nil); w.err != nil || len(w.events) != 0 {
				t.Fatalf("%s, batch %d, from now: %d events replayed, %v", stage, batch, len(w.events), w.err)
			}
		}
	}
	check("in Redis only")
	a := r.archiver(ArchiverOptions{}) // one archiver: it holds the lease
	if _, err := a.Once(r.ctx); err != nil {
		t.Fatal(err)
	}
	check("archived, still in Redis")
	r.c.XTrimMaxLen(r.ctx, stream, 3) // retention trimmed the older part
	check("older part trimmed")

	// A watch resumed in the archived part goes on into Redis and the live
	// tail: three events appended while it runs arrive once each.
	s := svc(2)
	added := 0
	live := watchUntil(t, s, &cyclesv1.WatchEventsRequest{TenantId: tn, Start: cyclesv1.StartPosition_START_POSITION_CURSOR,
		Cursor: golden.cursors[1]}, func(n int) {
		if n == 1 {
			r.appendEvents(tn, 3)
			added = 3
		}
	}, func() int { return len(golden.events) - 2 + added })
	if live.err != nil {
		t.Fatal(live.err)
	}
	all := watchUntilHeartbeat(t, s, &cyclesv1.WatchEventsRequest{TenantId: tn, Start: cyclesv1.StartPosition_START_POSITION_EARLIEST}, nil)
	sameGrown(t, "log", all, live, golden, added)

	if _, err := a.Once(r.ctx); err != nil {
		t.Fatal(err)
	}
	r.c.Del(r.ctx, stream)
	golden = all
	check("none left in Redis")
}

// TestWatchArchiveOutage: when the archive cannot be read in the middle of a
// watch that replays it (one tenant's, or the all-tenant feed), the watch
// ends with UNAVAILABLE and an ErrorInfo (reason UNAVAILABLE), after
// delivering a prefix of the log: never a silent gap. Resuming from the
// last cursor once the archive is back delivers the rest, each event once.
func TestWatchArchiveOutage(t *testing.T) {
	tenants := []string{"arc-outage-a", "arc-outage-b"}
	r := newRig(t, tenants...)
	ann := events.NewAnnouncer(r.exec, events.AnnouncerOptions{})
	for round := 0; round < 6; round++ {
		r.announceRound(ann, tenants, 3)
	}
	opts := func(rd Reader) events.Options {
		return events.Options{ArchivedStream: rd.Stream, ReadBatch: 2, Heartbeat: 30 * time.Millisecond,
			FeedBlock: 20 * time.Millisecond, StreamEventsPerSecond: -1, TenantEventsPerSecond: -1,
			FeedStreamEventsPerSecond: -1, FeedEventsPerSecond: -1}
	}
	plain := opts(Reader{})
	plain.ArchivedStream = nil
	cases := []struct {
		name   string
		tenant string
	}{
		{"one tenant", tenants[0]},
		{"all tenants", ""},
	}
	goldens := make([]watched, len(cases))
	for i, tc := range cases {
		goldens[i] = watchUntilHeartbeat(t, events.New(r.exec, plain),
			&cyclesv1.WatchEventsRequest{TenantId: tc.tenant, Start: cyclesv1.StartPosition_START_POSITION_EARLIEST}, nil)
		if goldens[i].err != nil || len(goldens[i].events) < 18 {
			t.Fatalf("%s: golden watch: %d events, %v", tc.name, len(goldens[i].events), goldens[i].err)
		}
	}
	if _, err := r.archiver(ArchiverOptions{}).Once(r.ctx); err != nil {
		t.Fatal(err)
	}
	r.c.XTrimMaxLen(r.ctx, keys.Feed, 1)
	for _, tn := range tenants {
		r.c.XTrimMaxLen(r.ctx, keys.Tenant(tn).Events(), 2)
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			golden := goldens[i]
			// The watch reads through its own connection pool, closed after
			// the first event: the archive is gone for it from then on. With
			// one message of send buffer the watch reads at most a batch
			// ahead of this client: with the default 64 it could read every
			// archived batch before the close, catch up and end on a
			// heartbeat (seen once under load).
			st, err := archive.Open(r.ctx, r.dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			o := opts(Reader{Store: st})
			o.SendBuffer = 1
			w := watchUntilHeartbeat(t, events.New(r.exec, o),
				&cyclesv1.WatchEventsRequest{TenantId: tc.tenant, Start: cyclesv1.StartPosition_START_POSITION_EARLIEST},
				func(n int) {
					if n == 1 {
						st.Close()
					}
				})
			e, ok := apierr.As(w.err)
			if !ok || e.Code != apierr.Unavailable {
				t.Fatalf("watch over a closed archive ended with %v, want UNAVAILABLE", w.err)
			}
			stat := e.Status("", "")
			if code, _, ok := apierr.FromStatus(stat.Err()); !ok || code != apierr.Unavailable || stat.Code() != codes.Unavailable {
				t.Fatalf("status %v: want UNAVAILABLE with ErrorInfo reason UNAVAILABLE", stat)
			}
			if len(w.events) == 0 || len(w.events) >= len(golden.events) {
				t.Fatalf("%d events before the outage, want a strict prefix of %d", len(w.events), len(golden.events))
			}
			sameBytes(t, "before the outage", w.events, golden.events[:len(w.events)])

			rest := watchUntilHeartbeat(t, events.New(r.exec, opts(Reader{Store: r.store})),
				&cyclesv1.WatchEventsRequest{TenantId: tc.tenant, Start: cyclesv1.StartPosition_START_POSITION_CURSOR,
					Cursor: w.cursors[len(w.cursors)-1]}, nil)
			if rest.err != nil {
				t.Fatal(rest.err)
			}
			sameBytes(t, "resumed after the outage", rest.events, golden.events[len(w.events):])
		})
	}
}
