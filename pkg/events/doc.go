// Package events serves the durable, ordered event log of each tenant
// (docs/protocol.md#events) and builds the event context that every
// event-emitting script takes (context.go).
//
// # The log
//
// Each tenant has one Redis Stream, keys.Tenant(t).Events(), in the tenant's
// Cluster slot. Ledger, admin and sweeper scripts append to it with emit_event
// (lua/lib/core.lua) inside the same script as the state change, so an event
// exists if and only if its change happened (transactional outbox; never on
// idempotent replays). Entries are ordered per tenant by stream id; there is no
// order across tenants.
//
// # Retention
//
// Every append trims the stream with XADD MINID ~ (now - retention): the
// trim is bounded per append (whole radix nodes only, never a scan) and
// approximate in the safe direction (it may keep a little more). Retention is
// the -event-retention setting, default 7 days; every replica must use the
// same value, because readers use it to decide whether a cursor is still
// complete. The stream of a tenant that emits nothing is trimmed at its next
// append.
//
// # Cursors
//
// Every event carries a cursor: the unpadded base64url of its stream id
// "<ms>-<seq>". Heartbeats carry the reader's position, which may add a
// watermark ("<ms>-<seq>.<redis time ms>": everything up to that time had been
// read). Cursors are opaque to clients; anything not issued by this server is
// INVALID_REQUEST (INVALID_ARGUMENT) on the cursor field.
//
// Resuming from a cursor returns exactly the events after it, in order. The
// resume is refused with FAILED_PRECONDITION, reason CURSOR_EXPIRED, when
// retention may have trimmed events the reader has not seen: the cursor's
// position is older than the oldest retained entry and its watermark is older
// than now - retention (+1 min of clock slack). Trimming removes only a prefix
// of the log, and only entries older than now - retention, so this test never
// misses a gap; its only false alarm is a reader whose last event is older than
// retention and who has no newer watermark (heartbeat cursors carry one). The
// same check runs on every read of a live watch, so a watcher that falls behind
// retention is told rather than silently skipped ahead.
//
// # WatchEvents
//
// Start: NOW (default; events appended after the call), EARLIEST (oldest
// retained) or CURSOR. Each watcher reads the stream itself, ReadBatch entries
// at a time, from its own position: the stream is the buffer, so a watcher
// holds at most one batch in memory, a slow client only slows its own reads
// (gRPC flow control blocks its Send), and nothing a watcher does can block an
// append or another watcher. When a watcher has caught up it waits for one
// shared per-tenant poller (PollInterval, default 250 ms) to see the tail move,
// so N idle watchers of a tenant cost one cheap read per interval per process.
// A watch that sent nothing for Heartbeat (default 15 s) sends a heartbeat with
// the server time and a resumable cursor, which keeps idle streams alive
// through proxies.
//
// # Who sees what
//
// A tenant API key reads its own tenant's log (tenant_id empty or equal, else
// PERMISSION_DENIED) and only the tenant-accessible categories budget,
// reservation and tenant (asking for another category is PERMISSION_DENIED;
// without a category filter the others are simply not delivered). The admin key
// must name tenant_id (INVALID_ARGUMENT otherwise) and sees every category.
//
// All tenants at once (admin) is deliberately not a single stream: on Cluster
// the tenant logs live on different shards and have no common order, and a
// global stream would be a cross-slot write in every script. The design for it
// is a fan-in: walk keys.Tenants in pages, run one per-tenant reader (exactly
// as WatchEvents does) per tenant, merge their outputs without any
// cross-tenant order, and hand out a composite cursor (tenant -> stream id)
// that resumes each tenant independently; tenants registered later are picked
// up by re-walking the registry. Until that exists an operator watches tenants
// one stream each.
//
// # ListEvents
//
// The same log, oldest first, filtered like WatchEvents plus from_ms/to_ms on
// the event timestamp; limit 1..200 (default 50). Each call scans at most
// 4 x limit entries, so a selective filter can return a short page with
// has_more set; next_cursor is present exactly when has_more is true.
package events
