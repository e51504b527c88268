package events_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/events"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/telemetry/telemetrytest"
	"github.com/cyclesgo/cycles-go/test/redistest"
	"github.com/cyclesgo/cycles-go/test/scripttest"
)

// Announcements that arrive late, twice or out of order (several replicas,
// retries, the sweeper's reconciliation) still give every tenant contiguous,
// non-overlapping feed ranges starting at 0-0, on every backend; and the
// hook only reacts to tenant event streams.
func TestAnnounceMakesContiguousRanges(t *testing.T) {
	for _, be := range redistest.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			ctx := context.Background()
			ex := scripttest.New(t, be)
			a, b := newTenant(), newTenant()
			before := feedLen(t, be.Client)
			for _, step := range []struct{ tenant, id string }{
				{a, "5-0"}, {a, "5-0"}, {b, "7-1"}, {a, "3-0"}, {a, "10-2"}, {b, "7-1"}, {a, "10-10"}, {a, "9-0"},
			} {
				ann := events.NewAnnouncer(ex, events.AnnouncerOptions{}) // a fresh replica each time
				ann.Observe(step.tenant, step.id)
				if err := ann.Flush(ctx); err != nil {
					t.Fatal(err)
				}
			}
			ann := events.NewAnnouncer(ex, events.AnnouncerOptions{})
			ann.Hook(keys.Tenants, "11-0")           // not a tenant stream: ignored
			ann.Hook(keys.Tenant(b).Events(), "bad") // not a stream id: ignored
			if err := ann.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			got := map[string][]string{}
			msgs, err := be.Client.XRange(ctx, keys.Feed, "-", "+").Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range msgs[before:] {
				tn := m.Values["t"].(string)
				got[tn] = append(got[tn], m.Values["from"].(string)+">"+m.Values["to"].(string))
			}
			want := map[string][]string{a: {"0-0>5-0", "5-0>10-2", "10-2>10-10"}, b: {"0-0>7-1"}}
			for tn, w := range want {
				if len(got[tn]) != len(w) {
					t.Fatalf("tenant ranges %v, want %v", got, want)
				}
				for i := range w {
					if got[tn][i] != w[i] {
						t.Fatalf("tenant ranges %v, want %v", got, want)
					}
				}
			}
			if mark := be.Client.HGet(ctx, keys.FeedMarks, a).Val(); mark != "10-10" {
				t.Fatalf("mark %q", mark)
			}
		})
	}
}

func feedLen(t *testing.T, c redis.UniversalClient) int {
	t.Helper()
	n, err := c.XLen(context.Background(), keys.Feed).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	return int(n)
}

// The all-tenant watch, with its blocking wake-up on the feed, works on the
// embedded store (dev mode) as on Redis.
func TestFeedWatchOnEveryBackend(t *testing.T) {
	for _, be := range redistest.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			m := telemetrytest.New()
			e := newEnvFor(t, be, events.Options{MeterProvider: m.Provider})
			ex := scripttest.New(t, be)
			ann := events.NewAnnouncer(ex, events.AnnouncerOptions{})
			a := newTenant()
			ctx := testCtx(t)
			s := e.watch(asAdmin(ctx), &cyclesv1.WatchEventsRequest{})
			waitActive(t, m, 1)
			time.Sleep(50 * time.Millisecond) // let the watcher block on the feed
			id := e.appendEvent(a, ev{})
			ann.Observe(a, id)
			if err := ann.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			for {
				got := recvEvents(t, s, 1)[0]
				if got.GetTenantId() != a {
					continue // another test's tenant on the shared store
				}
				if p, err := events.DecodeFeedCursor("cursor", got.GetCursor()); err != nil || p.Partial {
					t.Fatalf("cursor %q: %+v %v", got.GetCursor(), p, err)
				}
				break
			}
		})
	}
}

// A script call that got no reply may have appended events: the announcer
// reads that tenant's log once the call cannot be running any more and
// announces what it finds.
func TestAnnouncerChecksTenantsOfCallsWithoutReply(t *testing.T) {
	c := redistest.SharedClient(t)
	ex := scripttest.Shared(t)
	e := &env{t: t, c: c}
	a := newTenant()
	id := e.appendEvent(a, ev{}) // appended by a call whose reply was lost
	ann := events.NewAnnouncer(ex, events.AnnouncerOptions{})
	ann.Hook(keys.Tenant(a).Events(), "")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = ann.Run(ctx) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(20 * time.Second)
	for c.HGet(context.Background(), keys.FeedMarks, a).Val() != id {
		if time.Now().After(deadline) {
			t.Fatal("the unsure tenant was never announced")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
