// Package sweeper expires reservations that are past expires_at + grace, across
// all tenants (docs/protocol.md#expiry, docs/design.md#the-sweeper).
//
// # One script per tenant batch
//
// lua/sweeper/expire_batch.lua does everything for up to BatchSize due
// reservations of one tenant in one EVALSHA: it reads Redis TIME, selects the
// due ids from the tenant's deadline index (score = expires_at + grace_ms,
// ZRANGEBYSCORE -inf (now LIMIT 0 N), and decides and mutates each one
// atomically (refund every budgeted scope, state EXPIRED, expired_at, ZREM,
// PEXPIRE 30 d, one reservation.expired event in the tenant's stream). It
// returns per-outcome counts and how many entries are still due; the sweeper
// calls it again at once while any are, so a backlog drains at the speed of
// Redis with the Go side holding one small reply at a time.
//
// # Bounded by time as well as by count
//
// A script holds Redis while it runs: every other tenant's reserve waits
// behind it. BatchSize bounds a call's memory, but not its time (1,000 due
// reservations on three scopes with their events took 40 ms on a quiet
// machine and up to 640 ms on a loaded one, past the client's read deadline).
// So the script also reads Redis TIME before each candidate after the first
// and stops once BatchTime (default 5 ms, -sweeper-batch-time) has passed;
// due > 0 in its reply makes the sweeper call again at once. The price is
// more, shorter calls (one round trip each); the gain is that a backlog of any
// size never makes Redis unresponsive for longer than about BatchTime per
// call, however many reservations are due. BatchTime is not adapted from
// measured durations on the Go side: the script measures itself, on the one
// clock that matters, and the count bound stays as the memory bound.
//
// # A call whose reply is lost still counts
//
// Each batch call has its own deadline, CallTimeout (default 500 ms, a
// hundred times BatchTime; the Redis client's read timeout caps it too), so a
// call times out only when Redis is stalled or overloaded. A call that times
// out on the client may still have run to the end inside Redis. Its effects
// are then complete and exactly-once (the entries it expired left the index),
// but its reply, with its counts, is gone. So each drain of a tenant names a
// tally hash (keys.Tenant.SweepTally, random drain id, 10-minute TTL
// refreshed by every call that counts something): every call adds its
// outcomes there in the same script, and every reply returns the totals. The
// drain reports the totals of its last reply and advances the outcome
// counters by their growth, so the sweep's counts, Status and
// cycles.sweeper.outcomes stay exact. A call with no reply (UNAVAILABLE) is
// retried up to CallAttempts times in a row; past that the tenant is left to
// the next sweep and the sweep reports the error. A tally exists only for a
// drain that expired something and lives at most 10 minutes after its last
// call: a few small hashes per busy tenant.
//
// # Finding due tenants without missing one
//
// Deadline indexes are per tenant (one Cluster slot each), so the sweeper needs
// the set of tenants. It walks the global registry keys.Tenants (a zset the
// admin plane adds a tenant to BEFORE it creates the tenant record) in pages of
// TenantPage with ZRANGEBYLEX, using the last member seen as the cursor, and
// runs the batch script for every tenant, Workers tenants at a time.
//
// Why no tenant is missed: tenants are never removed from the registry, and a
// member cursor (unlike an offset) is not shifted by concurrent inserts, so
// every tenant registered when a sweep starts is visited by that sweep; one
// registered during the sweep is visited by it or by the next. A reservation
// can only exist for a tenant that has a key, a key only for a tenant record,
// and a record only after registration, so every tenant with reservations is in
// the registry. (Test fixtures that write reservations directly must register
// their tenant too.) Nothing depends on a timer or a notification that could be
// lost: each sweep re-derives the full candidate set from durable state.
//
// Cost: one EVALSHA per registered tenant per sweep (Interval, default 5 s),
// which for a tenant with nothing due is a TIME and one O(log n) ZCOUNT; plus
// one registry read per TenantPage tenants. 10,000 tenants cost
// about 2,000 cheap script calls per second across the deployment at the
// default interval, spread over Workers concurrent calls (and over the shards
// on Cluster, where each tenant's call goes to the shard owning its slot while
// the registry is one key on one shard).
//
// # Safety with many replicas
//
// Every replica may sweep at the same time: each decision is made inside the
// script that mutates, on the state it reads, so a reservation is expired once
// whatever the interleaving (a second sweeper, a commit or a release sees
// EXPIRED or has already removed the id; the loser gets SKIP or
// RESERVATION_EXPIRED). No lease is needed. Within one process SweepOnce calls
// are serialized (Run and OpsService.TriggerSweep share one sweep at a time).
//
// # Outcomes
//
// expired, skipped (already COMMITTED/RELEASED/EXPIRED: index entry removed),
// in_grace (the record's own deadline is not past: entry re-scored to it),
// not_found (record gone: entry removed), quarantined (corrupt record or a
// refund that cannot be applied exactly: the record is kept and flagged with
// quarantined_at/quarantine_reason and added to the tenant's quarantine index
// (keys.Tenant.Quarantine), its entry removed, the ledger untouched;
// reasons INVALID_STATE, INVALID_EXPIRY, INVALID_ESTIMATE, MISSING_SCOPES,
// MALFORMED_SCOPES, MISSING_BUDGET, CORRUPT_BUDGET, RESERVED_UNDERFLOW,
// AMOUNT_OVERFLOW, WRONG_TYPE). Each is counted by cycles.sweeper.outcomes
// {outcome} and in Status. Operators list and resolve quarantined
// reservations with OpsService (internal/ledgerops, docs/operations-runbook.md).
//
// # Operator controls
//
// PauseSweeper/ResumeSweeper set and clear a flag in Redis
// (keys.SweeperControl), so one call pauses every replica: Run reads it before
// each sweep and skips the sweep while it is set (counted by
// cycles.sweeper.paused_intervals). If the flag cannot be read, Run sweeps
// anyway: a stuck sweeper holds money. Explicit sweeps (TriggerSweep,
// SweepTenant for one tenant) run whether paused or not.
package sweeper
