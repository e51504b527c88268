package events_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/events"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/test/redistest"
)

// appendIDs appends n events to tenant's stream in one pipeline, with event
// ids evt_<prefix><n as 4 hex>, category cat; it returns the event ids and
// stream ids, oldest first.
func (e *env) appendIDs(tenant, prefix, cat string, n int) (evIDs, streamIDs []string) {
	e.t.Helper()
	ctx := context.Background()
	cmds := make([]*redis.StringCmd, n)
	_, err := e.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := 0; i < n; i++ {
			id := fmt.Sprintf("evt_%s%04x", prefix, i)
			evIDs = append(evIDs, id)
			cmds[i] = p.XAdd(ctx, &redis.XAddArgs{Stream: keys.Tenant(tenant).Events(), ID: "*",
				Values: []any{"id", id, "type", cat + ".updated", "cat", cat,
					"ts", strconv.FormatInt(time.Now().UnixMilli(), 10), "scope", "tenant:" + tenant, "actor", "admin",
					"key_id", "", "req", "r1", "trace", "0123456789abcdef0123456789abcdef", "src", "cyclesd", "data", `{"n":"1"}`}})
		}
		return nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, c := range cmds {
		streamIDs = append(streamIDs, c.Val())
	}
	return evIDs, streamIDs
}

// GetEvent finds an event anywhere in a tenant's retained log (across several
// search windows), with the same envelope and cursor as a listing; it keeps
// tenants apart and hides from a tenant key what it may not list.
func TestGetEvent(t *testing.T) {
	e := newEnv(t, redistest.SharedClient(t), events.Options{})
	a, b := newTenant(), newTenant()
	// 4,500 events: the oldest lies in the third search window.
	ids, sids := e.appendIDs(a, "aaaaaaaaaaaa", "tenant", 4500)
	keyIDs, _ := e.appendIDs(a, "bbbbbbbbbbbb", "api_key", 3)
	otherIDs, _ := e.appendIDs(b, "cccccccccccc", "tenant", 2)
	ctx := testCtx(t)
	admin, tenantA := asAdmin(ctx), asTenant(ctx, a)

	for _, i := range []int{0, 1999, 2000, 4499} {
		got, err := e.client.GetEvent(admin, &cyclesv1.GetEventRequest{TenantId: a, EventId: ids[i]})
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		ev := got.GetEvent()
		if ev.GetEventId() != ids[i] || ev.GetTenantId() != a || ev.GetCategory() != "tenant" || mustID(t, ev) != sids[i] ||
			ev.GetData().GetFields()["n"].GetStringValue() != "1" {
			t.Fatalf("event %d: %v", i, ev)
		}
	}
	// The tenant key reads its own tenant without naming it.
	if got, err := e.client.GetEvent(tenantA, &cyclesv1.GetEventRequest{EventId: ids[7]}); err != nil || got.GetEvent().GetEventId() != ids[7] {
		t.Fatalf("tenant key: %v %v", got, err)
	}
	// The admin key sees every category.
	if _, err := e.client.GetEvent(admin, &cyclesv1.GetEventRequest{TenantId: a, EventId: keyIDs[1]}); err != nil {
		t.Fatalf("admin api_key event: %v", err)
	}

	refused := []struct {
		name   string
		ctx    context.Context
		req    *cyclesv1.GetEventRequest
		code   codes.Code
		reason apierr.Code
	}{
		{"category hidden from a tenant key", tenantA, &cyclesv1.GetEventRequest{EventId: keyIDs[1]}, codes.NotFound, apierr.EventNotFound},
		{"another tenant's event", admin, &cyclesv1.GetEventRequest{TenantId: a, EventId: otherIDs[0]}, codes.NotFound, apierr.EventNotFound},
		{"unknown id", admin, &cyclesv1.GetEventRequest{TenantId: a, EventId: "evt_0123456789abcdef"}, codes.NotFound, apierr.EventNotFound},
		{"not an event id", admin, &cyclesv1.GetEventRequest{TenantId: a, EventId: "nope"}, codes.NotFound, apierr.EventNotFound},
		{"empty log", admin, &cyclesv1.GetEventRequest{TenantId: newTenant(), EventId: ids[0]}, codes.NotFound, apierr.EventNotFound},
		{"admin without tenant_id", admin, &cyclesv1.GetEventRequest{EventId: ids[0]}, codes.InvalidArgument, apierr.InvalidRequest},
		{"tenant key naming another tenant", tenantA, &cyclesv1.GetEventRequest{TenantId: b, EventId: otherIDs[0]}, codes.PermissionDenied, apierr.Forbidden},
		{"no event id", admin, &cyclesv1.GetEventRequest{TenantId: a}, codes.InvalidArgument, apierr.InvalidRequest},
		{"no key", ctx, &cyclesv1.GetEventRequest{TenantId: a, EventId: ids[0]}, codes.Unauthenticated, ""},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.client.GetEvent(tc.ctx, tc.req)
			if status.Code(err) != tc.code || tc.reason != "" && reasonOf(err) != tc.reason {
				t.Fatalf("got %v (reason %s), want %s %s", err, reasonOf(err), tc.code, tc.reason)
			}
		})
	}
}

// The find script (exclusive XREVRANGE bounds included) behaves the same on
// real Redis and on the embedded store of dev mode.
func TestGetEventOnEveryBackend(t *testing.T) {
	for _, be := range redistest.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			e := newEnvFor(t, be, events.Options{})
			a := newTenant()
			ids, _ := e.appendIDs(a, "dddddddddddd", "tenant", 4100) // three windows
			for _, i := range []int{0, 2100, 4099} {
				got, err := e.client.GetEvent(asAdmin(testCtx(t)), &cyclesv1.GetEventRequest{TenantId: a, EventId: ids[i]})
				if err != nil || got.GetEvent().GetEventId() != ids[i] {
					t.Fatalf("event %d: %v %v", i, got, err)
				}
			}
			_, err := e.client.GetEvent(asAdmin(testCtx(t)), &cyclesv1.GetEventRequest{TenantId: a, EventId: "evt_ffffffffffffffff"})
			if reasonOf(err) != apierr.EventNotFound {
				t.Fatalf("unknown id: %v", err)
			}
		})
	}
}

// An event id names its tenant ("evt_<tenant>_<16 hex>"), so the admin key
// reads it without tenant_id; a mismatched tenant, another tenant's key or an
// older id without tenant_id find nothing or are told what is missing.
func TestGetEventByTenantNamedID(t *testing.T) {
	e := newEnv(t, redistest.SharedClient(t), events.Options{})
	a, b := newTenant(), newTenant()
	ids, sids := e.appendIDs(a, a+"_eeeeeeeeeeee", "tenant", 2500) // the oldest in the second window
	legacy, _ := e.appendIDs(a, "ffffffffffff", "tenant", 1)
	ctx := testCtx(t)
	admin := asAdmin(ctx)
	for _, i := range []int{0, 2499} {
		if tn, ok := events.TenantOfEventID(ids[i]); !ok || tn != a {
			t.Fatalf("TenantOfEventID(%s) = %q %v", ids[i], tn, ok)
		}
		got, err := e.client.GetEvent(admin, &cyclesv1.GetEventRequest{EventId: ids[i]})
		if err != nil || got.GetEvent().GetEventId() != ids[i] || got.GetEvent().GetTenantId() != a || mustID(t, got.GetEvent()) != sids[i] {
			t.Fatalf("event %d without tenant_id: %v %v", i, got, err)
		}
	}
	if got, err := e.client.GetEvent(asTenant(ctx, a), &cyclesv1.GetEventRequest{EventId: ids[3]}); err != nil || got.GetEvent().GetEventId() != ids[3] {
		t.Fatalf("own tenant key: %v %v", got, err)
	}
	for _, tc := range []struct {
		name   string
		ctx    context.Context
		req    *cyclesv1.GetEventRequest
		code   codes.Code
		reason apierr.Code
	}{
		{"tenant_id not the id's", admin, &cyclesv1.GetEventRequest{TenantId: b, EventId: ids[0]}, codes.NotFound, apierr.EventNotFound},
		{"another tenant's key", asTenant(ctx, b), &cyclesv1.GetEventRequest{EventId: ids[0]}, codes.NotFound, apierr.EventNotFound},
		{"names an empty tenant", admin, &cyclesv1.GetEventRequest{EventId: "evt_" + b + "_0123456789abcdef"}, codes.NotFound, apierr.EventNotFound},
		{"older id without tenant_id", admin, &cyclesv1.GetEventRequest{EventId: legacy[0]}, codes.InvalidArgument, apierr.InvalidRequest},
		{"not an event id", admin, &cyclesv1.GetEventRequest{EventId: "evt_x_123"}, codes.NotFound, apierr.EventNotFound},
		{"bad tenant in id", admin, &cyclesv1.GetEventRequest{EventId: "evt_A!_0123456789abcdef"}, codes.NotFound, apierr.EventNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.client.GetEvent(tc.ctx, tc.req)
			if status.Code(err) != tc.code || reasonOf(err) != tc.reason {
				t.Fatalf("got %v (reason %s), want %s %s", err, reasonOf(err), tc.code, tc.reason)
			}
		})
	}
	// The older form still reads with tenant_id.
	if _, err := e.client.GetEvent(admin, &cyclesv1.GetEventRequest{TenantId: a, EventId: legacy[0]}); err != nil {
		t.Fatalf("older id with tenant_id: %v", err)
	}
}
