package crash

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/test/crash/cyclesdtest"
	"github.com/cyclesgo/cycles-go/test/redistest"
)

// TestFeedSurvivesCyclesdKill: one all-tenant subscriber (admin key, no
// tenant_id) watches reservation.expired of three tenants through the real
// binary. cyclesd is SIGKILLed between two reads of the subscriber while
// reservations are about to expire; after the restart the subscriber resumes
// from the last cursor it processed and receives exactly the expirations it
// had not seen: none lost, none twice.
func TestFeedSurvivesCyclesdKill(t *testing.T) {
	srv := redistest.Start(t)
	d := cyclesdtest.Start(t, binary, srv.Addr, "-sweeper-interval", "100ms")
	d.WaitServing(t)
	conn := d.Conn(t)
	tenants := []string{"feed-kill-a", "feed-kill-b", "feed-kill-c"}
	keys := map[string]string{}
	for _, tn := range tenants {
		keys[tn] = cyclesdtest.Provision(t, conn, tn, cyclesdtest.Budget{Allocated: 1_000_000})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	rt := cyclesv1.NewRuntimeServiceClient(conn)
	n := 0
	reserve := func(count int) []string {
		var ids []string
		for _, tn := range tenants {
			for i := 0; i < count; i++ {
				n++
				ttl, grace := int64(1000), int64(0)
				r, err := rt.CreateReservation(cyclesdtest.KeyCtx(ctx, keys[tn]), &cyclesv1.CreateReservationRequest{
					IdempotencyKey: fmt.Sprintf("feed-kill-%d", n), Subject: &cyclesv1.Subject{Workspace: "prod"}, Action: &cyclesv1.Action{Kind: "llm.completion", Name: "m"},
					Estimate: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 5}, TtlMs: &ttl, GracePeriodMs: &grace})
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, r.GetReservationId())
			}
		}
		slices.Sort(ids)
		return ids
	}
	events := cyclesv1.NewEventServiceClient(conn)
	watch := func(ctx context.Context, start cyclesv1.StartPosition, cursor string) cyclesv1.EventService_WatchEventsClient {
		s, err := events.WatchEvents(cyclesdtest.AdminCtx(ctx), &cyclesv1.WatchEventsRequest{
			EventTypes: []string{"reservation.expired"}, Start: start, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	var cursor string
	recv := func(s cyclesv1.EventService_WatchEventsClient, want int) []string {
		var got []string
		for len(got) < want {
			m, err := s.Recv()
			if err != nil {
				t.Fatalf("after %d of %d: %v", len(got), want, err)
			}
			if e := m.GetEvent(); e != nil {
				got = append(got, e.GetData().GetFields()["reservation_id"].GetStringValue())
				cursor = e.GetCursor() // "processed": store the cursor after handling the event
			}
		}
		slices.Sort(got)
		return got
	}

	first, stop := context.WithCancel(ctx)
	s := watch(first, cyclesv1.StartPosition_START_POSITION_EARLIEST, "")
	want := reserve(3)
	if got := recv(s, len(want)); !slices.Equal(got, want) {
		t.Fatalf("before the kill\n got %v\nwant %v", got, want)
	}
	stop()

	// Reservations that expire while cyclesd is dead.
	missed := reserve(4)
	d.Kill()
	time.Sleep(1200 * time.Millisecond)
	d.Restart(t)
	d.WaitServing(t)

	s = watch(ctx, cyclesv1.StartPosition_START_POSITION_CURSOR, cursor)
	if got := recv(s, len(missed)); !slices.Equal(got, missed) {
		t.Fatalf("after the kill\n got %v\nwant %v", got, missed)
	}
	// And nothing twice: the next event is a new expiry.
	next := reserve(1)
	if got := recv(s, len(next)); !slices.Equal(got, next) {
		t.Fatalf("after resume got %v, want %v", got, next)
	}
}
