package archiver

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/audit"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/events"
	"github.com/cyclesgo/cycles-go/internal/keys"
)

func marshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// marshalAll is marshal of every message of a page.
func marshalAll[M proto.Message](t *testing.T, ms []M) [][]byte {
	t.Helper()
	out := make([][]byte, 0, len(ms))
	for _, m := range ms {
		out = append(out, marshal(t, m))
	}
	return out
}

// readPages reads a paged listing to its end: page answers the page at a
// cursor (start for the first call) with its items, the next cursor and
// whether more follow, or an error, which fails the test; so does a listing
// of more than 200 pages.
func readPages(t *testing.T, what, start string, page func(cursor string) (items [][]byte, next string, more bool, err error)) [][]byte {
	t.Helper()
	var out [][]byte
	cursor := start
	for range 200 {
		items, next, more, err := page(cursor)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		out = append(out, items...)
		if !more {
			return out
		}
		cursor = next
	}
	t.Fatalf("%s does not end", what)
	return nil
}

// TestStreamReadsPastRetention: GetEvent, ListEvents and the audit listing
// give the same events and entries, in the same order and with the same
// bytes, while the streams are whole in Redis, once archived, once Redis
// retention has trimmed their older part (the listing spans both stores)
// and once Redis holds none of them. Entries sharing a millisecond keep
// their stream order; a global audit entry that names a tenant stays in
// the global log's listing, not the tenant's.
func TestStreamReadsPastRetention(t *testing.T) {
	const tn = "arc-streamread"
	r := newRig(t, tn)
	tk := keys.Tenant(tn)
	add := func(stream, id string, values ...string) {
		if _, err := r.c.XAdd(r.ctx, &redis.XAddArgs{Stream: stream, ID: id, Values: values}).Result(); err != nil {
			t.Fatal(err)
		}
	}
	base := time.Now().Add(-time.Hour).UnixMilli()
	var eventIDs []string
	for i := 0; i < 7; i++ {
		id := fmt.Sprintf("evt_%s_%016x", tn, i)
		eventIDs = append(eventIDs, id)
		fields := []string{"id", id, "type", "reservation.committed",
			"cat", "reservation", "ts", fmt.Sprint(base + int64(i/3)), "scope", "tenant:" + tn, "data", fmt.Sprintf(`{"n":%d}`, i)}
		if i%2 == 0 {
			// The correlation id is the entry's last field, written only
			// when set (lua/lib/core.lua emit_event): both layouts archive.
			fields = append(fields, "corr", "cor_even")
		}
		add(tk.Events(), fmt.Sprintf("%d-%d", base+int64(i/3), i%3), fields...)
	}
	for i := 0; i < 5; i++ {
		add(tk.Audit(), fmt.Sprintf("%d-%d", base+int64(i/2), i%2), "id", fmt.Sprintf("aud_t%d", i), "t", tn,
			"op", "commitReservation", "st", "200", "rid", fmt.Sprintf("r%d", i))
	}
	for i := 0; i < 4; i++ {
		who := []string{"__unauth__", tn}[i%2] // a global entry may name a tenant
		add(keys.AuditLog, fmt.Sprintf("%d-%d", base+int64(i/2), i%2), "id", fmt.Sprintf("aud_g%d", i), "t", who,
			"op", "auth", "st", "401", "ec", "UNAUTHORIZED")
	}
	rd := Reader{Store: r.store}
	ev := events.New(r.exec, events.Options{ArchivedStream: rd.Stream, ArchivedEvent: rd.Event})
	aud := audit.New(r.exec, audit.Options{ArchivedStream: rd.Stream})
	admin := auth.Principal{Admin: true}

	type read struct {
		name string
		do   func() [][]byte
	}
	listEvents := func(req *cyclesv1.ListEventsRequest) [][]byte {
		return readPages(t, "event listing", req.GetCursor(), func(cursor string) ([][]byte, string, bool, error) {
			req.Cursor = cursor
			res, err := ev.List(r.ctx, admin, req)
			return marshalAll(t, res.GetEvents()), res.GetNextCursor(), res.GetHasMore(), err
		})
	}
	listAudit := func(req *cyclesv1.ListAuditLogsRequest) [][]byte {
		return readPages(t, "audit listing", req.GetCursor(), func(cursor string) ([][]byte, string, bool, error) {
			req.Cursor = cursor
			res, err := aud.ListAuditLogs(r.ctx, req)
			return marshalAll(t, res.GetLogs()), res.GetNextCursor(), res.GetHasMore(), err
		})
	}
	reads := []read{
		{"events", func() [][]byte { return listEvents(&cyclesv1.ListEventsRequest{TenantId: tn}) }},
		{"events, pages of 2", func() [][]byte { return listEvents(&cyclesv1.ListEventsRequest{TenantId: tn, Limit: 2}) }},
		{"events from a time", func() [][]byte {
			return listEvents(&cyclesv1.ListEventsRequest{TenantId: tn, Limit: 1, FromMs: proto.Int64(base + 1)})
		}},
		{"events by correlation id", func() [][]byte {
			return listEvents(&cyclesv1.ListEventsRequest{TenantId: tn, CorrelationId: "cor_even", Limit: 1})
		}},
		{"get every event", func() [][]byte {
			var out [][]byte
			for _, id := range eventIDs {
				res, err := ev.Get(r.ctx, admin, &cyclesv1.GetEventRequest{EventId: id})
				if err != nil {
					t.Fatalf("get %s: %v", id, err)
				}
				out = append(out, marshal(t, res))
			}
			return out
		}},
		{"tenant audit, pages of 2", func() [][]byte { return listAudit(&cyclesv1.ListAuditLogsRequest{TenantId: tn, Limit: 2}) }},
		{"global audit", func() [][]byte { return listAudit(&cyclesv1.ListAuditLogsRequest{TenantId: "__unauth__"}) }},
		{"all audit, pages of 3", func() [][]byte { return listAudit(&cyclesv1.ListAuditLogsRequest{Limit: 3}) }},
		{"audit filtered", func() [][]byte {
			return listAudit(&cyclesv1.ListAuditLogsRequest{Operations: []string{"auth"}, Limit: 1})
		}},
	}
	golden := make([][][]byte, len(reads))
	for i, rd := range reads {
		golden[i] = rd.do()
		if len(golden[i]) == 0 {
			t.Fatalf("%s: nothing read proves nothing", rd.name)
		}
	}
	if n := len(golden[7]); n != 9 {
		t.Fatalf("all audit: %d entries, want 9", n)
	}
	if n := len(golden[3]); n != 4 || !bytes.Contains(golden[3][0], []byte("cor_even")) {
		t.Fatalf("events by correlation id: %d, want the 4 with one", n)
	}
	check := func(stage string) {
		t.Helper()
		for i, rd := range reads {
			sameBytes(t, stage+", "+rd.name, rd.do(), golden[i])
		}
	}
	if _, err := r.archiver(ArchiverOptions{}).Once(r.ctx); err != nil {
		t.Fatal(err)
	}
	check("archived, still in Redis")
	for _, k := range []string{tk.Events(), tk.Audit(), keys.AuditLog} {
		r.c.XTrimMaxLen(r.ctx, k, 2) // retention trimmed the older part
	}
	check("older part trimmed")
	r.c.Del(r.ctx, tk.Events(), tk.Audit(), keys.AuditLog)
	check("all trimmed")
	if _, err := ev.Get(r.ctx, admin, &cyclesv1.GetEventRequest{EventId: fmt.Sprintf("evt_%s_%016x", tn, 99)}); !apierr.HasCode(err, apierr.EventNotFound) {
		t.Fatalf("an event never archived: %v", err)
	}
}
