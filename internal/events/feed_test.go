package events_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/api/eventsapi"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/events"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/ledger"
	"github.com/cyclesgo/cycles-go/internal/server"
	"github.com/cyclesgo/cycles-go/internal/sweeper"
	"github.com/cyclesgo/cycles-go/internal/telemetry/telemetrytest"
	"github.com/cyclesgo/cycles-go/test/grpctest"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
	"github.com/cyclesgo/cycles-go/test/property/hashslot"
	"github.com/cyclesgo/cycles-go/test/redistest"
	"github.com/cyclesgo/cycles-go/test/scripttest"
)

// replica is one in-process cyclesd as far as the feed is concerned: its own
// executor (with or without the announcer hook), announcer, sweeper, ledger
// and EventService behind the production interceptor chain. All its state is
// in Redis, so a second replica on the same Redis is a restarted cyclesd.
type replica struct {
	ann    *events.Announcer
	sw     *sweeper.Sweeper
	led    *ledger.Ledger
	client cyclesv1.EventServiceClient
	m      *telemetrytest.Reader
	stop   context.CancelFunc
}

// newReplica starts a replica; announce=false is a cyclesd that appends
// events but dies before announcing any of them (the crash window).
func newReplica(t *testing.T, c redis.UniversalClient, announce bool, opts events.Options) *replica {
	t.Helper()
	ex := scripttest.On(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	r := &replica{m: telemetrytest.New(), stop: cancel}
	r.ann = events.NewAnnouncer(ex, events.AnnouncerOptions{})
	if announce {
		ex.SetEventHook(r.ann.Hook)
		done := make(chan struct{})
		go func() { defer close(done); _ = r.ann.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
	} else {
		t.Cleanup(cancel)
	}
	r.sw = sweeper.New(ex, sweeper.Options{Reconcile: r.ann.Reconcile})
	r.led = ledger.New(ex, ledger.Options{})
	if opts.Heartbeat == 0 {
		opts.Heartbeat = time.Hour
	}
	opts.MeterProvider = r.m.Provider
	svc := events.New(ex, opts)
	conn := grpctest.Start(t, server.Services{Events: eventsapi.New(svc)})
	r.client = cyclesv1.NewEventServiceClient(conn)
	return r
}

// tenantsOnSlots returns n new tenant ids whose keys fall in n different
// thirds of the slot space: different masters of the 3-master test cluster.
func tenantsOnSlots(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	used := map[int]bool{}
	for len(out) < n {
		id := ledgertest.NewTenantID(t)
		third := hashslot.Slot(keys.Tenant(id).Record()) * 3 / hashslot.Slots
		if !used[third%3] || len(used) == 3 {
			used[third%3] = true
			out = append(out, id)
		}
	}
	return out
}

// seededTenants returns n tenants on different masters (tenantsOnSlots),
// each seeded with a tenant-wide budget.
func seededTenants(t *testing.T, c redis.UniversalClient, n int) []string {
	t.Helper()
	tenants := tenantsOnSlots(t, n)
	for _, x := range tenants {
		seedTenant(t, c, x)
	}
	return tenants
}

func seedTenant(t *testing.T, c redis.UniversalClient, tenant string) {
	ledgertest.SeedTenant(t, c, tenant, ledgertest.Tenant{})
	ledgertest.SeedBudget(t, c, tenant, ledgertest.Budget{Scope: "tenant:" + tenant, Unit: "TOKENS", Allocated: 1_000_000_000})
}

// reserve makes n reservations of tenant that expire after 1 s (no grace)
// and returns their ids.
func (r *replica) reserve(t *testing.T, tenant string, n int) []string {
	t.Helper()
	var ids []string
	for i := 0; i < n; i++ {
		ttl, grace := int64(1000), int64(0)
		res, err := r.led.Reserve(context.Background(), tenant, &cyclesv1.CreateReservationRequest{
			IdempotencyKey: fmt.Sprintf("k-%d-%d", time.Now().UnixNano(), i),
			Action:         &cyclesv1.Action{Kind: "llm.completion", Name: "m"},
			Estimate:       &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 10},
			TtlMs:          &ttl, GracePeriodMs: &grace,
		})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.GetReservationId())
	}
	return ids
}

// sweepAfterExpiry waits out the 1 s ttl and runs one sweep.
func (r *replica) sweepAfterExpiry(t *testing.T, want int64) {
	t.Helper()
	time.Sleep(1100 * time.Millisecond)
	got, err := r.sw.SweepOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got.Expired < want {
		t.Fatalf("sweep expired %d, want at least %d", got.Expired, want)
	}
}

// expiryWatcher receives reservation.expired events of the given tenants
// from an all-tenant watch (the shared Redis carries other tests' tenants).
type expiryWatcher struct {
	s       cyclesv1.EventService_WatchEventsClient
	tenants map[string]bool
	last    string // cursor of the last event received
}

func (w *expiryWatcher) next(t *testing.T, n int) []*cyclesv1.Event {
	t.Helper()
	var out []*cyclesv1.Event
	for len(out) < n {
		m, err := w.s.Recv()
		if err != nil {
			t.Fatalf("after %d of %d events: %v", len(out), n, err)
		}
		e := m.GetEvent()
		if e == nil {
			continue
		}
		w.last = e.GetCursor()
		if w.tenants[e.GetTenantId()] {
			out = append(out, e)
		}
	}
	return out
}

func (r *replica) watchAll(t *testing.T, ctx context.Context, tenants []string, start cyclesv1.StartPosition, cursor string) *expiryWatcher {
	t.Helper()
	s, err := r.client.WatchEvents(asAdmin(ctx), &cyclesv1.WatchEventsRequest{
		EventTypes: []string{"reservation.expired"}, Start: start, Cursor: cursor})
	if err != nil {
		t.Fatal(err)
	}
	w := &expiryWatcher{s: s, tenants: map[string]bool{}}
	for _, x := range tenants {
		w.tenants[x] = true
	}
	return w
}

// reservationIDs checks per-tenant order (stream ids only grow along a
// tenant's events) and returns the expired reservation ids, sorted.
func reservationIDs(t *testing.T, evs []*cyclesv1.Event) []string {
	t.Helper()
	var ids []string
	lastTS := map[string]int64{}
	for _, e := range evs {
		if e.GetEventType() != "reservation.expired" {
			t.Fatalf("event %v", e)
		}
		if e.GetTimestampMs() < lastTS[e.GetTenantId()] {
			t.Fatalf("tenant %s out of order: %v", e.GetTenantId(), e)
		}
		lastTS[e.GetTenantId()] = e.GetTimestampMs()
		ids = append(ids, e.GetData().GetFields()["reservation_id"].GetStringValue())
	}
	slices.Sort(ids)
	return ids
}

func sorted(groups ...[]string) []string {
	var out []string
	for _, g := range groups {
		out = append(out, g...)
	}
	slices.Sort(out)
	return out
}

// One all-tenant subscriber receives every reservation.expired of three
// tenants on three different slots (three masters on the test cluster)
// exactly once and in per-tenant order; after a disconnect it resumes, on a
// second replica (a restarted cyclesd: nothing but Redis and the cursor
// carry over), with exactly the expirations it missed, including those of a
// tenant created after its cursor was issued; and nothing is delivered twice.
func TestFeedEveryExpiryOnceAcrossTenantsAndReplicas(t *testing.T) {
	c := redistest.SharedClient(t)
	one := newReplica(t, c, true, events.Options{})
	tenants := seededTenants(t, c, 3)
	late := ledgertest.NewTenantID(t) // created after the cursor
	all := append(slices.Clone(tenants), late)
	ctx := testCtx(t)

	first, cancel := context.WithCancel(ctx)
	w := one.watchAll(t, first, all, cyclesv1.StartPosition_START_POSITION_NOW, "")
	waitActive(t, one.m, 1)
	var want1 [][]string
	for _, x := range tenants {
		want1 = append(want1, one.reserve(t, x, 5))
	}
	one.sweepAfterExpiry(t, 15)
	got := w.next(t, 15)
	if ids := reservationIDs(t, got); !slices.Equal(ids, sorted(want1...)) {
		t.Fatalf("first round\n got %v\nwant %v", ids, sorted(want1...))
	}
	if tn := map[string]bool{}; true {
		for _, e := range got {
			tn[e.GetTenantId()] = true
		}
		if len(tn) != 3 {
			t.Fatalf("events from %d tenants, want 3", len(tn))
		}
	}
	cursor := w.last
	cancel() // disconnect

	// While away: more expirations, and a tenant that did not exist when
	// the cursor was issued.
	seedTenant(t, c, late)
	var want2 [][]string
	for _, x := range all {
		want2 = append(want2, one.reserve(t, x, 4))
	}
	one.sweepAfterExpiry(t, 16)

	two := newReplica(t, c, true, events.Options{})
	w2 := two.watchAll(t, ctx, all, cyclesv1.StartPosition_START_POSITION_CURSOR, cursor)
	if ids := reservationIDs(t, w2.next(t, 16)); !slices.Equal(ids, sorted(want2...)) {
		t.Fatalf("after resume\n got %v\nwant %v", ids, sorted(want2...))
	}
	// Nothing more (no duplicate) comes before the next expiry.
	marker := two.reserve(t, tenants[0], 1)
	two.sweepAfterExpiry(t, 1)
	if ids := reservationIDs(t, w2.next(t, 1)); !slices.Equal(ids, marker) {
		t.Fatalf("after the gap got %v, want %v", ids, marker)
	}
}

// A cyclesd killed after its scripts appended events but before it announced
// them loses nothing: the next replica's first sweep reconciles every
// tenant's log with the feed, and a subscriber resuming from its cursor gets
// exactly the events the dead replica wrote.
func TestFeedRepairsAnnouncementsACrashLost(t *testing.T) {
	c := redistest.SharedClient(t)
	live := newReplica(t, c, true, events.Options{})
	tenants := seededTenants(t, c, 3)
	ctx := testCtx(t)
	first, cancel := context.WithCancel(ctx)
	w := live.watchAll(t, first, tenants, cyclesv1.StartPosition_START_POSITION_NOW, "")
	waitActive(t, live.m, 1)
	before := live.reserve(t, tenants[0], 2)
	live.sweepAfterExpiry(t, 2)
	if ids := reservationIDs(t, w.next(t, 2)); !slices.Equal(ids, sorted(before)) {
		t.Fatalf("got %v want %v", ids, before)
	}
	cursor := w.last
	cancel()

	// The crashed replica: expires reservations (events appended in the
	// same script) and never announces them.
	dead := newReplica(t, c, false, events.Options{})
	var lost [][]string
	for _, x := range tenants {
		lost = append(lost, dead.reserve(t, x, 3))
	}
	dead.sweepAfterExpiry(t, 9)
	dead.stop()

	restarted := newReplica(t, c, true, events.Options{})
	if _, err := restarted.sw.SweepOnce(ctx); err != nil { // first sweep: reconciles
		t.Fatal(err)
	}
	w2 := restarted.watchAll(t, ctx, tenants, cyclesv1.StartPosition_START_POSITION_CURSOR, cursor)
	if ids := reservationIDs(t, w2.next(t, 9)); !slices.Equal(ids, sorted(lost...)) {
		t.Fatalf("after the crash\n got %v\nwant %v", ids, sorted(lost...))
	}
}

// ListEvents pages the same feed: every event once across pages, each page
// resumable from next_cursor; a tenant key cannot list it.
func TestFeedListPages(t *testing.T) {
	c := redistest.SharedClient(t)
	r := newReplica(t, c, true, events.Options{})
	tenants := seededTenants(t, c, 3)
	ctx := testCtx(t)
	begin := time.Now().UnixMilli()
	var want [][]string
	for _, x := range tenants {
		want = append(want, r.reserve(t, x, 7))
	}
	r.sweepAfterExpiry(t, 21)
	flush(t, r)
	in := map[string]bool{}
	for _, x := range tenants {
		in[x] = true
	}
	var got []*cyclesv1.Event
	cursor, pages := "", 0
	for {
		resp, err := r.client.ListEvents(asAdmin(ctx), &cyclesv1.ListEventsRequest{
			EventTypes: []string{"reservation.expired"}, Limit: 4, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, e := range resp.GetEvents() {
			if in[e.GetTenantId()] {
				got = append(got, e)
			}
		}
		if !resp.GetHasMore() {
			break
		}
		if resp.GetNextCursor() == "" || len(resp.GetEvents()) > 4 {
			t.Fatalf("page %d: %v", pages, resp)
		}
		cursor = resp.GetNextCursor()
	}
	if ids := reservationIDs(t, got); !slices.Equal(ids, sorted(want...)) || pages < 6 {
		t.Fatalf("%d pages\n got %v\nwant %v", pages, ids, sorted(want...))
	}
	// A time window: from_ms seeks the feed; every event since begin is in
	// the window, none after an hour from now.
	var windowed []*cyclesv1.Event
	for cur := ""; ; {
		resp, err := r.client.ListEvents(asAdmin(ctx), &cyclesv1.ListEventsRequest{EventTypes: []string{"reservation.expired"}, FromMs: &begin, Limit: 200, Cursor: cur})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range resp.GetEvents() {
			if in[e.GetTenantId()] {
				windowed = append(windowed, e)
			}
		}
		if !resp.GetHasMore() {
			break
		}
		cur = resp.GetNextCursor()
	}
	if ids := reservationIDs(t, windowed); !slices.Equal(ids, sorted(want...)) {
		t.Fatalf("from_ms window\n got %v\nwant %v", ids, sorted(want...))
	}
	// A time window: from_ms after every event lists none of them.
	later := time.Now().Add(time.Hour).UnixMilli()
	resp, err := r.client.ListEvents(asAdmin(ctx), &cyclesv1.ListEventsRequest{EventTypes: []string{"reservation.expired"}, FromMs: &later})
	if err != nil || len(resp.GetEvents()) != 0 || resp.GetHasMore() {
		t.Fatalf("from_ms in the future: %v %v", resp, err)
	}
	_, err = r.client.ListEvents(asTenant(ctx, tenants[0]), &cyclesv1.ListEventsRequest{Cursor: cursor})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("tenant key on the feed: %v", err)
	}
}

func flush(t *testing.T, r *replica) {
	t.Helper()
	if err := r.ann.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A tenant key cannot watch the all-tenant feed: resuming a feed cursor is
// PERMISSION_DENIED, and without tenant_id it reads its own tenant only.
func TestFeedNeedsTheAdminKey(t *testing.T) {
	c := redistest.SharedClient(t)
	r := newReplica(t, c, true, events.Options{})
	ctx := testCtx(t)
	a := newTenant()
	cursor := events.EncodeFeedCursor(events.FeedPosition{Entry: events.ID{MS: 1}})
	s, err := r.client.WatchEvents(asTenant(ctx, a), &cyclesv1.WatchEventsRequest{Start: cyclesv1.StartPosition_START_POSITION_CURSOR, Cursor: cursor})
	if err != nil {
		t.Fatal(err)
	}
	if err := recvErr(s, 10*time.Second); status.Code(err) != codes.PermissionDenied || reasonOf(err) != apierr.Forbidden {
		t.Fatalf("tenant key on the feed: %v", err)
	}
}

// A subscriber that stops reading is cut off with RESOURCE_EXHAUSTED,
// reason SLOW_CONSUMER, once its bounded buffer stays full for the stall
// period; it would resume from its last cursor.
func TestFeedCutsOffASlowSubscriber(t *testing.T) {
	c := redistest.SharedClient(t)
	ex := scripttest.Shared(t)
	ann := events.NewAnnouncer(ex, events.AnnouncerOptions{})
	svc := events.New(ex, events.Options{SendBuffer: 4, SendStall: 100 * time.Millisecond, Heartbeat: time.Hour})
	a := newTenant()
	e := &env{t: t, c: c}
	var last string
	for i := 0; i < 30; i++ {
		last = e.appendEvent(a, ev{})
	}
	ann.Observe(a, last)
	if err := ann.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	stuck := make(chan struct{})
	defer close(stuck)
	done := make(chan error, 1)
	go func() {
		done <- svc.Watch(testCtx(t), auth.Principal{Admin: true}, &cyclesv1.WatchEventsRequest{Start: cyclesv1.StartPosition_START_POSITION_EARLIEST},
			func(*cyclesv1.WatchEventsResponse) error { <-stuck; return nil })
	}()
	select {
	case err := <-done:
		ae, ok := apierr.As(err)
		if !ok || ae.Code != apierr.SlowConsumer || ae.Code.GRPCCode() != codes.ResourceExhausted {
			t.Fatalf("slow subscriber: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a subscriber that reads nothing was never cut off")
	}
}

// A feed cursor older than the feed's retained entries, with no newer
// watermark, is CURSOR_EXPIRED (never a silent skip); the same position with
// a fresh watermark (a heartbeat cursor of a caught-up reader) resumes.
func TestFeedCursorExpired(t *testing.T) {
	c := redistest.SharedClient(t)
	r := newReplica(t, c, true, events.Options{})
	ctx := testCtx(t)
	a := newTenant()
	e := &env{t: t, c: c}
	r.ann.Observe(a, e.appendEvent(a, ev{}))
	flush(t, r)
	old := events.EncodeFeedCursor(events.FeedPosition{Entry: events.ID{MS: 1}})
	_, err := r.client.ListEvents(asAdmin(ctx), &cyclesv1.ListEventsRequest{Cursor: old})
	if status.Code(err) != codes.FailedPrecondition || reasonOf(err) != events.ReasonCursorExpired {
		t.Fatalf("ancient feed cursor: %v", err)
	}
	s, err := r.client.WatchEvents(asAdmin(ctx), &cyclesv1.WatchEventsRequest{Start: cyclesv1.StartPosition_START_POSITION_CURSOR, Cursor: old})
	if err != nil {
		t.Fatal(err)
	}
	if err := recvErr(s, 10*time.Second); status.Code(err) != codes.FailedPrecondition || reasonOf(err) != events.ReasonCursorExpired {
		t.Fatalf("ancient feed cursor on watch: %v", err)
	}
	fresh := events.EncodeFeedCursor(events.FeedPosition{Entry: events.ID{MS: 1}, Watermark: time.Now().UnixMilli()})
	if _, err := r.client.ListEvents(asAdmin(ctx), &cyclesv1.ListEventsRequest{Cursor: fresh}); err != nil {
		t.Fatalf("fresh watermark: %v", err)
	}
}
