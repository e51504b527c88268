package events_test

import (
	"testing"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/events"
	"github.com/cyclesgo/cycles-go/test/redistest"
)

// The all-tenant feed is paced like a tenant stream (pace.go): an admin
// watch without tenant_id that reads past its burst waits before its next
// read, and so does a listing of the feed, which pays from the same shared
// feed bucket; within the burst, or with the feed rates unlimited, neither
// waits. The tenant rates are unlimited here, so only the feed's pacing can
// count.
func TestFeedReplayIsPaced(t *testing.T) {
	const n = 40 // events, 5 reads of ReadBatch 8
	for _, tc := range []struct {
		name  string
		rate  float64
		burst int
		paced bool
	}{
		{"feed rates set", 1000, 8, true},
		{"within the feed burst", 1000, 2 * n, false},
		{"feed rates unlimited", -1, 8, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := redistest.Start(t).Client(t) // a feed of this test's events only
			r := newReplica(t, c, true, events.Options{ReadBatch: 8,
				FeedStreamEventsPerSecond: tc.rate, FeedEventsPerSecond: tc.rate, FeedBurstEvents: tc.burst,
				StreamEventsPerSecond: -1, TenantEventsPerSecond: -1})
			x := newTenant()
			seedTenant(t, c, x)
			r.reserve(t, x, n)
			r.sweepAfterExpiry(t, n)
			flush(t, r)
			ctx := testCtx(t)

			s, err := r.client.WatchEvents(asAdmin(ctx), &cyclesv1.WatchEventsRequest{
				EventTypes: []string{"reservation.expired"}, Start: cyclesv1.StartPosition_START_POSITION_EARLIEST})
			if err != nil {
				t.Fatal(err)
			}
			if got := len(recvEvents(t, s, n)); got != n {
				t.Fatalf("watched %d events, want %d", got, n)
			}
			watched := r.m.Sum(t, "cycles.events.paced")

			resp, err := r.client.ListEvents(asAdmin(ctx), &cyclesv1.ListEventsRequest{
				EventTypes: []string{"reservation.expired"}, Limit: n})
			if err != nil || len(resp.GetEvents()) != n {
				t.Fatalf("listed %d events (%v), want %d", len(resp.GetEvents()), err, n)
			}
			listed := r.m.Sum(t, "cycles.events.paced") - watched
			if tc.paced && (watched == 0 || listed == 0) {
				t.Errorf("feed reads held back: watch %d, list %d times; want both > 0", watched, listed)
			}
			if !tc.paced && watched+listed != 0 {
				t.Errorf("unlimited feed rates held reads back %d times", watched+listed)
			}
		})
	}
}
