package events

import (
	"context"
	"fmt"
	"strconv"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/script"
)

// scriptRead reads one window of a tenant's stream (lua/events/read.lua).
var scriptRead = script.Bind[streamKeys, readArgs]("events/read")

type readArgs struct {
	From  string `lua:"from"`
	To    string `lua:"to"`
	Count int    `lua:"count"`
}

// maxRead is the read script's own bound on entries per call.
const maxRead = 1000

// window is one read of a tenant's stream (lua/events/read.lua).
type window struct {
	Now     int64                  `json:"now"`
	First   string                 `json:"first"`
	Last    string                 `json:"last"`
	Entries script.LuaArray[entry] `json:"entries"`
}

// entry is one event stream entry.
type entry = script.StreamEntry

// reader runs the read script; it is the only way internal/events touches Redis.
type reader struct {
	exec *script.Executor
}

// read returns up to n entries with from <= id <= to ("-"/"+" for the ends).
func (r reader) read(ctx context.Context, tenant, from, to string, n int) (window, error) {
	return r.readStream(ctx, keys.Tenant(tenant).Events(), from, to, n)
}

// readStream is read for any stream key (the all-tenant feed).
func (r reader) readStream(ctx context.Context, stream, from, to string, n int) (window, error) {
	if n > maxRead {
		n = maxRead
	}
	var w window
	if err := scriptRead.RunInto(ctx, r.exec, &w, streamKeys{stream}, readArgs{from, to, n}); err != nil {
		return window{}, fmt.Errorf("read %s: %w", stream, err)
	}
	return w, nil
}

// toEvent converts one stream entry (fields per internal/keys records.go) into the
// wire envelope. Malformed optional parts are dropped rather than failing the
// stream: the log is append-only history and must stay readable.
func toEvent(tenant string, e entry, id ID) *cyclesv1.Event {
	ev := buildEvent(tenant, e)
	ev.Cursor = EncodeCursor(Position{ID: id})
	return ev
}

// buildEvent converts a stream entry without a cursor: the all-tenant feed
// gives each event its own feed cursor, so a per-tenant one would be built
// only to be overwritten.
func buildEvent(tenant string, e entry) *cyclesv1.Event {
	f := e.F
	ts, _ := strconv.ParseInt(f["ts"], 10, 64)
	ev := &cyclesv1.Event{
		EventId:     f["id"],
		EventType:   f["type"],
		Category:    f["cat"],
		TimestampMs: ts,
		TenantId:    tenant,
		Scope:       f["scope"],
		Actor:       &cyclesv1.Actor{Type: f["actor"], KeyId: auth.PublicKeyID(tenant, f["key_id"])},
		Source:      f["src"],
		RequestId:   f["req"],
		TraceId:     f["trace"],
		// Absent on events without one (lua/lib/core.lua emit_event).
		CorrelationId: f["corr"],
	}
	if d := f["data"]; d != "" {
		var s structpb.Struct
		if err := protojson.Unmarshal([]byte(d), &s); err == nil {
			ev.Data = &s
		}
	}
	return ev
}
