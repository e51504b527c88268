// Package events serves the durable, ordered event log of each tenant
// (docs/protocol.md#events). The event context that every event-emitting
// script takes is built by the leaf package internal/eventctx.
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
// retention is told rather than silently skipped ahead. All-tenant cursors
// (below) are a different kind; each kind is INVALID_ARGUMENT where the other
// is expected.
//
// # WatchEvents
//
// Start: NOW (default; events appended after the call), EARLIEST (oldest
// retained) or CURSOR. Each watcher reads the stream itself, ReadBatch entries
// at a time, from its own position: the stream is the buffer, so a watcher
// holds at most one batch plus its send buffer in memory, a slow client only
// slows its own reads (and is cut off, see "Slow subscribers"), and nothing a
// watcher does can block an append or another watcher. When a watcher has caught up it waits for one
// shared per-tenant poller (PollInterval, default 250 ms) to see the tail move,
// so N idle watchers of a tenant cost one cheap read per interval per process.
// A watch that sent nothing for Heartbeat (default 15 s) sends a heartbeat with
// the server time and a resumable cursor, which keeps idle streams alive
// through proxies.
//
// With an archive (Options.ArchivedStream), the part of the log that
// retention trimmed from Redis is read from PostgreSQL below Redis's oldest
// entry, in the same order and with the same cursors (archived.go); a
// replay from it is paced like one from Redis, and a live watcher never
// reads it. Retention then means the archive's (Options.ArchiveRetention).
// The all-tenant feed is archived as well, entry for entry (cycles_feed):
// a feed reader below the feed's oldest Redis entry walks the archived
// entries first, and reads each range over both stores like a tenant
// watch, so feed cursors stay valid past the feed's Redis retention.
//
// # Who sees what
//
// A tenant API key reads its own tenant's log (tenant_id empty or equal, else
// PERMISSION_DENIED) and only the tenant-accessible categories budget,
// reservation and tenant (asking for another category is PERMISSION_DENIED;
// without a category filter the others are simply not delivered); an
// all-tenant cursor is PERMISSION_DENIED for it. The admin key names any
// tenant_id, or none for the all-tenant feed, and sees every category.
//
// The admin key without tenant_id reads every tenant at once: the all-tenant
// feed below.
//
// # The all-tenant feed
//
// Goal: one stream of every tenant's events, resumable from one small cursor,
// exactly once per tenant and in per-tenant order, on a single node, Sentinel
// and Cluster, with a cost that follows the active tenants and not the
// registered ones.
//
// Constraint: on Cluster a script only touches keys of one slot, and a
// tenant's keys are all in its own slot ({t:<tenant>}). The script that
// appends an event therefore cannot also write a global index, and no
// bucketing of an index helps (a bucket key is in another slot too). So the
// index is written in a second step, and the design makes that step safe to
// lose, repeat or reorder.
//
// The pieces:
//
//   - Announcement. Every script run that appends events returns the stream
//     key and the id of its last event as two extra result elements
//     (lua/lib/core.lua); the executor passes them to a hook
//     (script.Executor.SetEventHook). The Announcer keeps, per tenant, the
//     newest such id not yet announced (one entry per active tenant) and
//     flushes all of them in one call of lua/events/announce.lua, at once
//     when it is idle (so a burst of N tenants costs one feed write).
//   - The feed. keys.Feed (cy:{feed}:log) is a stream in one slot; next to
//     it, in the same slot, keys.FeedMarks holds per tenant the last stream
//     id already in the feed. events/announce turns "tenant T has events up
//     to X" into the entry {t: T, from: mark, to: X} and moves the mark to X,
//     only if X is after the mark. So each event of a tenant lies in exactly
//     one feed range, and a tenant's ranges follow each other in feed order,
//     however announcements race between replicas, repeat or arrive late.
//     Stream ids are only ever appended in increasing order, so the set of a
//     tenant's entries up to X is fixed once X exists: a range never gains
//     an event after it is announced. A tenant's first range starts at 0-0
//     (its whole retained log).
//   - Reading. A reader walks the feed in order and, for each entry, reads
//     the range (from, to] of that tenant's own log (events/read, in the
//     tenant's slot) in ReadBatch windows. Its position is the feed entry it
//     is in plus, when it stopped inside a range, the tenant stream id it
//     reached: FeedPosition, encoded as an opaque cursor of a few dozen bytes
//     ("a<entry>[~<id>][.<watermark>]", base64url) whatever the number of
//     tenants. Every event and every heartbeat carries one. Resuming from a
//     cursor continues exactly after that event, so delivery is exactly once
//     per tenant in per-tenant order; there is no order across tenants beyond
//     the feed's. Tenants created after a cursor was issued appear in the feed
//     like any other. A cursor only refers to Redis state, so any replica
//     resumes it.
//   - Repair. The announcement is lost if cyclesd dies between a script and
//     its flush (a few milliseconds of pending ids in memory; a clean stop
//     flushes after the last RPC). A call that got no reply (read timeout,
//     connection lost) may have run all the same: the executor tells the
//     hook its keys with no id, and the Announcer reads that tenant's newest
//     id a second later (when the script can no longer be running) and
//     announces it. Nothing is lost in the log itself, and
//     the tenant's next announcement covers the missed events too (ranges
//     start at the mark). For tenants that write nothing more, the sweeper
//     reconciles: on the first sweep of every process and then every
//     sweeper.Options.ReconcileInterval (default 10 min), its per-tenant
//     script also returns the tenant log's newest id, and the Announcer
//     announces it unless it knows the feed already covers it (an in-memory
//     map of one id per tenant it has announced, so an idle tenant costs no
//     feed call). So a crash delays the affected events until the restarted
//     process's first sweep (or any replica's next reconciliation), never
//     loses them. If no replica runs the sweeper, only the tenant's next
//     event repairs it.
//
// Cost. Writes: one announce call per flush, carrying every tenant that
// appended since the last one, plus one feed entry per (tenant, flush). On
// Cluster the feed and its marks are one slot, so all of that lands on one
// shard; flushes batch every tenant of a round, so the shard sees one call
// per round per replica, not one per event.
// Reads: one feed read per 100 ranges, one tenant-log read per range window.
// Idle: caught-up watchers of a process share one blocking XREAD on the feed
// (script.Executor.WaitStream, BLOCK FeedBlock = 2 s, with a deadline), woken
// at once by an append: one command per 2 s per process, whatever the number
// of watchers and tenants; a heartbeat re-reads the feed once per Heartbeat
// per watcher. Idle tenants cost the feed nothing except the reconciliation:
// one XREVRANGE inside the sweeper's own per-tenant script once per
// ReconcileInterval (10,000 tenants / 10 min = 17 per second). Memory: the
// feed holds one small entry per (tenant, flush) for the retention period;
// the marks hash one field per tenant that ever had an event.
//
// Delivery latency. An expiry is appended by the sweeper's script, announced
// by the flush right after it (one round trip), and a caught-up watcher is
// woken by its XREAD at once: the sweep that expires a reservation makes it
// visible within milliseconds of that tenant's batch. A sweep walks every
// tenant and drains each before moving on; the next sweep starts
// sweeper.Options.Interval (default 5 s) after one that finished. So an
// expiry is delivered within one sweeper interval plus one sweep pass of its
// deadline, plus the announce and wake-up round trips (well under 1 s; see
// cmd/cycles-bench -mode feed).
//
// Retention. The feed is trimmed like the tenant logs. A cursor whose feed
// position is older than the oldest retained entry (and whose watermark is
// older than the horizon) is CURSOR_EXPIRED, as for a tenant log. A range
// whose start is no longer in the tenant's log is reported as
// CURSOR_EXPIRED when its feed entry is within retention minus one hour of
// the horizon (ranges are announced within milliseconds, or one
// reconciliation interval after a crash); an EARLIEST reader gets such old
// ranges as far as they are retained instead.
//
// Slow subscribers. Every watch (per tenant or all tenants) reads ahead of
// its client into a buffer of SendBuffer messages (default 64) drained by
// one goroutine that blocks in gRPC flow control when the client does not
// read. When the buffer stays full for SendStall (default 30 s), the watch
// ends with RESOURCE_EXHAUSTED, reason SLOW_CONSUMER; the client resumes
// from the last cursor it processed. Memory per watch: SendBuffer messages,
// one feed batch (100 ranges) and one ReadBatch window of events.
//
// What a subscriber must do to never lose an event: store the cursor of an
// event (or heartbeat) only after processing it, and resume with
// START_POSITION_CURSOR and that cursor after any error or disconnect,
// within the retention period. It may see an event again only if it
// resumes from an older cursor than the last one it processed.
//
// # ListEvents
//
// The same log, oldest first, filtered like WatchEvents plus from_ms/to_ms on
// the event timestamp; limit 1..200 (default 50). Each call scans at most
// 4 x limit entries, so a selective filter can return a short page with
// has_more set; next_cursor is present exactly when has_more is true.
package events
