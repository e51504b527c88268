package events_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/events"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/telemetry/telemetrytest"
	"github.com/cyclesgo/cycles-go/test/redistest"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// A subscriber that disconnects mid-stream and resumes from its last cursor
// receives every event exactly once, in order, across the gap, including
// events appended while it was away and while it reconnects; and a subscriber
// of tenant A never sees tenant B, whose events are interleaved throughout.
func TestWatchResumeIsExactlyOnceAndTenantIsolated(t *testing.T) {
	m := telemetrytest.New()
	e := newEnv(t, redistest.SharedClient(t), events.Options{MeterProvider: m.Provider, ReadBatch: 7})
	a, b := newTenant(), newTenant()
	var want []string // tenant A stream ids in order
	appendBoth := func(n int) {
		for i := 0; i < n; i++ {
			want = append(want, e.appendEvent(a, ev{Scope: "tenant:" + a}))
			e.appendEvent(b, ev{Scope: "tenant:" + b})
		}
	}
	appendBoth(30)

	ctx := testCtx(t)
	first, cancel := context.WithCancel(asTenant(ctx, a))
	s := e.watch(first, &cyclesv1.WatchEventsRequest{Start: cyclesv1.StartPosition_START_POSITION_EARLIEST})
	got := recvEvents(t, s, 20)
	cancel() // disconnect mid-stream
	last := got[len(got)-1].GetCursor()

	appendBoth(25) // missed while away
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); appendBoth(25) }() // appended while reconnecting
	s2 := e.watch(asTenant(ctx, a), &cyclesv1.WatchEventsRequest{Start: cyclesv1.StartPosition_START_POSITION_CURSOR, Cursor: last})
	wg.Wait()
	got = append(got, recvEvents(t, s2, len(want)-20)...)

	var ids []string
	for _, ev := range got {
		if ev.GetTenantId() != a || ev.GetScope() != "tenant:"+a {
			t.Fatalf("tenant A subscriber saw %v", ev)
		}
		p, err := events.DecodeCursor("cursor", ev.GetCursor())
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, p.ID.String())
	}
	if !slices.Equal(ids, want) {
		t.Fatalf("received %d events\n got %v\nwant %v", len(ids), ids, want)
	}
	// Nothing more (no duplicate) arrives after the last event.
	appendBoth(1)
	if next := recvEvents(t, s2, 1)[0]; next.GetCursor() == "" || mustID(t, next) != want[len(want)-1] {
		t.Fatalf("after the gap: %v, want %s", next, want[len(want)-1])
	}
	// The first stream may have sent one more event before it noticed the
	// disconnect; every received one was counted.
	if n := m.Sum(t, "cycles.events.delivered", attribute.String("rpc", "watch")); n < int64(len(want)) {
		t.Fatalf("delivered counter %d, want at least %d", n, len(want))
	}
}

func mustID(t *testing.T, e *cyclesv1.Event) string {
	t.Helper()
	p, err := events.DecodeCursor("cursor", e.GetCursor())
	if err != nil {
		t.Fatal(err)
	}
	return p.ID.String()
}

// START_NOW skips history; every event carries its envelope and data.
func TestWatchFromNow(t *testing.T) {
	m := telemetrytest.New()
	e := newEnv(t, redistest.SharedClient(t), events.Options{MeterProvider: m.Provider})
	a := newTenant()
	e.appendEvent(a, ev{Type: "budget.funded"})
	ctx := testCtx(t)
	s := e.watch(asTenant(ctx, a), &cyclesv1.WatchEventsRequest{})
	// The watch reads the tail before it counts as open; wait for that.
	waitActive(t, m, 1)
	id := e.appendEvent(a, ev{Type: "reservation.expired", Cat: "reservation", Scope: "tenant:" + a + "/agent:x",
		Data: `{"reservation_id":"r1","estimated_amount":"9223372036854775807","ttl_ms":60000}`})
	got := recvEvents(t, s, 1)[0]
	if got.GetEventType() != "reservation.expired" || mustID(t, got) != id || got.GetTenantId() != a ||
		got.GetActor().GetType() != "api_key" || got.GetActor().GetKeyId() != "k1" || got.GetSource() != "cyclesd" ||
		got.GetRequestId() != "r1" || len(got.GetTraceId()) != 32 || got.GetTimestampMs() == 0 || len(got.GetEventId()) != 20 {
		t.Fatalf("event %v", got)
	}
	if f := got.GetData().GetFields(); f["estimated_amount"].GetStringValue() != "9223372036854775807" || f["ttl_ms"].GetNumberValue() != 60000 {
		t.Fatalf("data %v", got.GetData())
	}
}

func waitActive(t *testing.T, m *telemetrytest.Reader, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for m.Sum(t, "cycles.events.watches.active") != n {
		if time.Now().After(deadline) {
			t.Fatalf("active watches never reached %d", n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// Idle streams get heartbeats carrying a resumable cursor.
func TestHeartbeatCursorResumes(t *testing.T) {
	m := telemetrytest.New()
	e := newEnv(t, redistest.SharedClient(t), events.Options{MeterProvider: m.Provider, Heartbeat: 30 * time.Millisecond})
	a := newTenant()
	e.appendEvent(a, ev{})
	ctx := testCtx(t)
	c1, cancel := context.WithCancel(asTenant(ctx, a))
	s := e.watch(c1, &cyclesv1.WatchEventsRequest{Start: cyclesv1.StartPosition_START_POSITION_EARLIEST})
	recvEvents(t, s, 1)
	var hb *cyclesv1.Heartbeat
	for hb == nil {
		msg, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		hb = msg.GetHeartbeat()
	}
	cancel()
	if hb.GetCursor() == "" || hb.GetServerTimeMs() == 0 {
		t.Fatalf("heartbeat %v", hb)
	}
	if m.Sum(t, "cycles.events.heartbeats") == 0 {
		t.Fatal("heartbeat counter did not move")
	}
	want := []string{e.appendEvent(a, ev{}), e.appendEvent(a, ev{})}
	s2 := e.watch(asTenant(ctx, a), &cyclesv1.WatchEventsRequest{Start: cyclesv1.StartPosition_START_POSITION_CURSOR, Cursor: hb.GetCursor()})
	got := recvEvents(t, s2, 2)
	if mustID(t, got[0]) != want[0] || mustID(t, got[1]) != want[1] {
		t.Fatalf("resumed from heartbeat: %v", got)
	}
}

// A resume whose missed events may have been trimmed by retention is told so
// (FAILED_PRECONDITION, CURSOR_EXPIRED) instead of silently skipping; a
// reader whose own last event was trimmed but who had read everything up to
// a recent time is not.
func TestCursorExpiredAfterRetention(t *testing.T) {
	m := telemetrytest.New()
	c := redistest.SharedClient(t)
	e := newEnv(t, c, events.Options{MeterProvider: m.Provider})
	a := newTenant()
	ctx := testCtx(t)
	old := time.Now().Add(-8 * 24 * time.Hour).UnixMilli()
	for i := 0; i < 3; i++ {
		e.appendEvent(a, ev{ID: fmt.Sprintf("%d-%d", old, i)})
	}
	// A live watcher reads the old events, then sits caught up.
	live := e.watch(asTenant(ctx, a), &cyclesv1.WatchEventsRequest{Start: cyclesv1.StartPosition_START_POSITION_EARLIEST})
	seen := recvEvents(t, live, 3)
	// Cursors handed out before the trim.
	oldest := seen[0].GetCursor()
	newestOld := seen[2].GetCursor()
	hbCursor := events.EncodeCursor(events.Position{ID: events.ID{MS: uint64(old), Seq: 2}, Watermark: time.Now().UnixMilli()})

	// Retention trims the old prefix as emit_event's XADD MINID would.
	stream := keys.Tenant(a).Events()
	if err := c.XTrimMinID(ctx, stream, strconv.FormatInt(time.Now().Add(-7*24*time.Hour).UnixMilli(), 10)).Err(); err != nil {
		t.Fatal(err)
	}
	fresh := e.appendEvent(a, ev{})

	// The live watcher had read everything: no false alarm, it gets the new one.
	if got := recvEvents(t, live, 1)[0]; mustID(t, got) != fresh {
		t.Fatalf("live watcher got %v", got)
	}
	// Resuming from an old event's cursor: the events after it were trimmed.
	for _, cur := range []string{oldest, newestOld} {
		s := e.watch(asTenant(ctx, a), &cyclesv1.WatchEventsRequest{Start: cyclesv1.StartPosition_START_POSITION_CURSOR, Cursor: cur})
		err := recvErr(s, 10*time.Second)
		if status.Code(err) != codes.FailedPrecondition || reasonOf(err) != events.ReasonCursorExpired {
			t.Fatalf("resume from trimmed cursor: %v", err)
		}
		_, err = e.client.ListEvents(asTenant(ctx, a), &cyclesv1.ListEventsRequest{Cursor: cur})
		if status.Code(err) != codes.FailedPrecondition || reasonOf(err) != events.ReasonCursorExpired {
			t.Fatalf("list from trimmed cursor: %v", err)
		}
	}
	// A heartbeat cursor whose watermark is recent: nothing after it was lost.
	s := e.watch(asTenant(ctx, a), &cyclesv1.WatchEventsRequest{Start: cyclesv1.StartPosition_START_POSITION_CURSOR, Cursor: hbCursor})
	if got := recvEvents(t, s, 1)[0]; mustID(t, got) != fresh {
		t.Fatalf("heartbeat-cursor resume got %v", got)
	}
	if n := m.Sum(t, "cycles.events.cursor_expired"); n != 4 {
		t.Fatalf("cursor_expired counter %d, want 4", n)
	}
}

// Tenant keys see only their own tenant's budget, reservation and tenant
// categories and never the all-tenant feed; the admin key names any tenant
// and sees every category.
func TestAccessRules(t *testing.T) {
	e := newEnv(t, redistest.SharedClient(t), events.Options{})
	a := newTenant()
	ctx := testCtx(t)
	e.appendEvent(a, ev{Type: "api_key.created", Cat: "api_key"})
	e.appendEvent(a, ev{Type: "budget.funded", Cat: "budget"})
	e.appendEvent(a, ev{Type: "tenant.closed", Cat: "tenant"})
	feedCursor := events.EncodeFeedCursor(events.FeedPosition{Entry: events.ID{MS: 1}})

	cases := []struct {
		name   string
		ctx    context.Context
		req    *cyclesv1.ListEventsRequest
		code   codes.Code
		reason apierr.Code
		types  []string
	}{
		{"tenant sees tenant categories", asTenant(ctx, a), &cyclesv1.ListEventsRequest{}, codes.OK, "", []string{"budget.funded", "tenant.closed"}},
		{"tenant names itself", asTenant(ctx, a), &cyclesv1.ListEventsRequest{TenantId: a}, codes.OK, "", []string{"budget.funded", "tenant.closed"}},
		{"tenant asks for api_key", asTenant(ctx, a), &cyclesv1.ListEventsRequest{Categories: []string{"api_key"}}, codes.PermissionDenied, apierr.Forbidden, nil},
		{"tenant names another tenant", asTenant(ctx, newTenant()), &cyclesv1.ListEventsRequest{TenantId: a}, codes.PermissionDenied, apierr.Forbidden, nil},
		{"tenant key with an all-tenant cursor", asTenant(ctx, a), &cyclesv1.ListEventsRequest{Cursor: feedCursor}, codes.PermissionDenied, apierr.Forbidden, nil},
		{"admin names a tenant with an all-tenant cursor", asAdmin(ctx), &cyclesv1.ListEventsRequest{TenantId: a, Cursor: feedCursor}, codes.InvalidArgument, apierr.InvalidRequest, nil},
		{"admin resumes the feed with a tenant cursor", asAdmin(ctx), &cyclesv1.ListEventsRequest{Cursor: events.EncodeCursor(events.Position{ID: events.ID{MS: 1}})}, codes.InvalidArgument, apierr.InvalidRequest, nil},
		{"admin sees everything", asAdmin(ctx), &cyclesv1.ListEventsRequest{TenantId: a}, codes.OK, "", []string{"api_key.created", "budget.funded", "tenant.closed"}},
		{"anonymous", ctx, &cyclesv1.ListEventsRequest{TenantId: a}, codes.Unauthenticated, apierr.Unauthorized, nil},
		{"unknown category", asAdmin(ctx), &cyclesv1.ListEventsRequest{TenantId: a, Categories: []string{"nope"}}, codes.InvalidArgument, apierr.InvalidRequest, nil},
		{"garbage cursor", asTenant(ctx, a), &cyclesv1.ListEventsRequest{Cursor: "bm9wZQ"}, codes.InvalidArgument, apierr.InvalidRequest, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := e.client.ListEvents(tc.ctx, tc.req)
			if status.Code(err) != tc.code {
				t.Fatalf("code %v (%v), want %v", status.Code(err), err, tc.code)
			}
			if tc.code != codes.OK {
				if reasonOf(err) != tc.reason {
					t.Fatalf("reason %s, want %s", reasonOf(err), tc.reason)
				}
				return
			}
			var types []string
			for _, ev := range resp.GetEvents() {
				types = append(types, ev.GetEventType())
			}
			if !slices.Equal(types, tc.types) {
				t.Fatalf("types %v, want %v", types, tc.types)
			}
		})
	}
	// The same rules on the stream.
	s := e.watch(asTenant(ctx, a), &cyclesv1.WatchEventsRequest{Categories: []string{"api_key"}})
	if err := recvErr(s, 10*time.Second); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("watch api_key as tenant: %v", err)
	}
	s = e.watch(asAdmin(ctx), &cyclesv1.WatchEventsRequest{TenantId: a, Start: cyclesv1.StartPosition_START_POSITION_EARLIEST})
	if got := recvEvents(t, s, 3); got[0].GetCategory() != "api_key" {
		t.Fatalf("admin watch %v", got)
	}
	s = e.watch(asTenant(ctx, a), &cyclesv1.WatchEventsRequest{Start: cyclesv1.StartPosition_START_POSITION_CURSOR})
	if err := recvErr(s, 10*time.Second); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("watch from cursor without cursor: %v", err)
	}
}

// Event type, category and scope-prefix filters (prefix: the path itself or
// below it, on segment boundaries).
func TestFilters(t *testing.T) {
	e := newEnv(t, redistest.SharedClient(t), events.Options{})
	a := newTenant()
	ctx := asTenant(testCtx(t), a)
	root := "tenant:" + a
	e.appendEvent(a, ev{Type: "budget.exhausted", Scope: root + "/workspace:prod"})
	e.appendEvent(a, ev{Type: "budget.exhausted", Scope: root + "/workspace:prod/agent:x"})
	e.appendEvent(a, ev{Type: "budget.exhausted", Scope: root + "/workspace:prod2"})
	e.appendEvent(a, ev{Type: "reservation.expired", Cat: "reservation", Scope: root + "/workspace:prod"})
	e.appendEvent(a, ev{Type: "tenant.updated", Cat: "tenant"})

	count := func(req *cyclesv1.ListEventsRequest) int {
		resp, err := e.client.ListEvents(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return len(resp.GetEvents())
	}
	for name, tc := range map[string]struct {
		req  *cyclesv1.ListEventsRequest
		want int
	}{
		"all":              {&cyclesv1.ListEventsRequest{}, 5},
		"type":             {&cyclesv1.ListEventsRequest{EventTypes: []string{"budget.exhausted"}}, 3},
		"types":            {&cyclesv1.ListEventsRequest{EventTypes: []string{"budget.exhausted", "tenant.updated"}}, 4},
		"category":         {&cyclesv1.ListEventsRequest{Categories: []string{"reservation"}}, 1},
		"prefix":           {&cyclesv1.ListEventsRequest{ScopePrefix: root + "/workspace:prod"}, 3},
		"prefix and type":  {&cyclesv1.ListEventsRequest{ScopePrefix: root + "/workspace:prod", EventTypes: []string{"budget.exhausted"}}, 2},
		"root prefix":      {&cyclesv1.ListEventsRequest{ScopePrefix: root}, 4},
		"no such category": {&cyclesv1.ListEventsRequest{Categories: []string{"budget"}, EventTypes: []string{"tenant.updated"}}, 0},
	} {
		if got := count(tc.req); got != tc.want {
			t.Errorf("%s: %d events, want %d", name, got, tc.want)
		}
	}
	// Watch applies the same filter.
	s := e.watch(ctx, &cyclesv1.WatchEventsRequest{Start: cyclesv1.StartPosition_START_POSITION_EARLIEST, ScopePrefix: root + "/workspace:prod", EventTypes: []string{"reservation.expired"}})
	if got := recvEvents(t, s, 1)[0]; got.GetEventType() != "reservation.expired" {
		t.Fatalf("filtered watch %v", got)
	}
}

// ListEvents pages the log oldest first with a cursor, and filters by time.
func TestListEventsPages(t *testing.T) {
	m := telemetrytest.New()
	e := newEnv(t, redistest.SharedClient(t), events.Options{MeterProvider: m.Provider})
	a := newTenant()
	ctx := asTenant(testCtx(t), a)
	var want []string
	for i := 0; i < 120; i++ {
		want = append(want, e.appendEvent(a, ev{}))
	}
	list := must[*cyclesv1.ListEventsResponse](t)
	var got []string
	var pages []int
	req := &cyclesv1.ListEventsRequest{}
	for {
		resp := list(e.client.ListEvents(ctx, req))
		pages = append(pages, len(resp.GetEvents()))
		for _, ev := range resp.GetEvents() {
			got = append(got, mustID(t, ev))
		}
		if resp.GetHasMore() != (resp.GetNextCursor() != "") {
			t.Fatalf("has_more %v with next_cursor %q", resp.GetHasMore(), resp.GetNextCursor())
		}
		if !resp.GetHasMore() {
			break
		}
		req = &cyclesv1.ListEventsRequest{Cursor: resp.GetNextCursor()}
	}
	if !slices.Equal(pages, []int{50, 50, 20}) || !slices.Equal(got, want) {
		t.Fatalf("pages %v; got %d ids in order: %v", pages, len(got), slices.Equal(got, want))
	}
	limited := list(e.client.ListEvents(ctx, &cyclesv1.ListEventsRequest{Limit: 7}))
	if len(limited.GetEvents()) != 7 || !limited.GetHasMore() {
		t.Fatalf("limit 7: %d, has_more %v", len(limited.GetEvents()), limited.GetHasMore())
	}
	// Time window: ids carry the append time, so this selects a middle slice.
	mid := must[events.ID](t)(events.ParseID(want[60]))
	var from = int64(mid.MS)
	resp := list(e.client.ListEvents(ctx, &cyclesv1.ListEventsRequest{FromMs: &from, Limit: 200}))
	for _, ev := range resp.GetEvents() {
		if ev.GetTimestampMs() < from {
			t.Fatalf("event at %d before from_ms %d", ev.GetTimestampMs(), from)
		}
	}
	to := int64(0)
	if resp := list(e.client.ListEvents(ctx, &cyclesv1.ListEventsRequest{ToMs: &to})); len(resp.GetEvents()) != 0 {
		t.Fatalf("to_ms 0 returned %d", len(resp.GetEvents()))
	}
	if m.Sum(t, "cycles.events.delivered", attribute.String("rpc", "list")) < 120 {
		t.Fatal("list delivered counter did not move")
	}
	// Validation: from after to.
	one, two := int64(2), int64(1)
	if _, err := e.client.ListEvents(ctx, &cyclesv1.ListEventsRequest{FromMs: &one, ToMs: &two}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("from > to: %v", err)
	}
}

// A subscriber that stops reading does not hold back the log (appends keep
// succeeding) nor another subscriber of the same tenant, which receives every
// event while the slow one's buffer is one read batch.
func TestSlowSubscriberBlocksNobody(t *testing.T) {
	e := newEnv(t, redistest.SharedClient(t), events.Options{ReadBatch: 64})
	a := newTenant()
	ctx := asTenant(testCtx(t), a)
	slow := e.watch(ctx, &cyclesv1.WatchEventsRequest{Start: cyclesv1.StartPosition_START_POSITION_EARLIEST})
	_ = slow // never read: its server-side Send blocks on flow control
	fast := e.watch(ctx, &cyclesv1.WatchEventsRequest{Start: cyclesv1.StartPosition_START_POSITION_EARLIEST})
	const n = 3000
	big := `{"pad":"` + string(slices.Repeat([]byte("x"), 512)) + `"}`
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < n; i++ {
			e.appendEvent(a, ev{Data: big})
		}
	}()
	got := recvEvents(t, fast, n)
	<-done
	if len(got) != n {
		t.Fatalf("fast subscriber got %d", len(got))
	}
	if l := e.c.XLen(context.Background(), keys.Tenant(a).Events()).Val(); l != n {
		t.Fatalf("stream holds %d", l)
	}
}

// The read script behaves the same on real Redis and the embedded store,
// including an empty or missing stream.
func TestReadScriptOnEveryBackend(t *testing.T) {
	for _, be := range redistest.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			m := telemetrytest.New()
			e := newEnvFor(t, be, events.Options{MeterProvider: m.Provider})
			a := newTenant()
			ctx := asTenant(testCtx(t), a)
			list := must[*cyclesv1.ListEventsResponse](t)
			if resp := list(e.client.ListEvents(ctx, &cyclesv1.ListEventsRequest{})); len(resp.GetEvents()) != 0 || resp.GetHasMore() {
				t.Fatalf("empty stream: %v", resp)
			}
			s := e.watch(ctx, &cyclesv1.WatchEventsRequest{})
			waitActive(t, m, 1)
			id := e.appendEvent(a, ev{})
			if got := recvEvents(t, s, 1)[0]; mustID(t, got) != id {
				t.Fatalf("got %v", got)
			}
			resp := list(e.client.ListEvents(ctx, &cyclesv1.ListEventsRequest{}))
			if len(resp.GetEvents()) != 1 {
				t.Fatalf("list %v", resp)
			}
		})
	}
}
