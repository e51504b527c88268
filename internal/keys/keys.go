// Package keys is the single definition of cyclesd's Redis key layout.
//
// Every key of a tenant carries the tenant's hash tag "{t:<tenant>}", so every
// script that touches one tenant runs in one Cluster slot. Scripts receive the
// keys they touch in KEYS; where a script must derive a key from data it reads
// (a reservation id from the deadline index, a budget key from a reservation's
// budgeted scopes), it derives it with lua/lib/keys.lua (tested against this
// package) from the tenant prefix KEYS[1] ("cy:{t:T}:" + suffix below), which
// keeps it in the same slot.
//
//	Key                              Type    Holds                                         TTL
//	cy:{t:T}:tenant                  hash    tenant record (status, defaults, `pol`)       none
//	cy:{t:T}:apikey:<key_id>         hash    API key (sha256 of secret, status, name)      none
//	cy:{t:T}:apikeys                 zset    key ids (lex, score 0)                        none
//	cy:{t:T}:b:<scope_path>:<UNIT>   hash    budget: packed balance `bal`, caps, metadata  none
//	cy:{t:T}:budgets                 zset    "<scope_path>|<UNIT>" (lex, score 0)          none
//	cy:{t:T}:pol                     hash    scope policy id -> JSON (internal/policy)     none
//	cy:{t:T}:r:<reservation_id>      hash    reservation record + replay snapshots         none while ACTIVE, 30 d once terminal
//	cy:{t:T}:r:deadline              zset    ACTIVE reservation id -> expires_at + grace   none
//	cy:{t:T}:r:quarantine            zset    quarantined ACTIVE id -> quarantined_at       none
//	cy:{t:T}:r:created               zset    reservation id -> created_at_ms               entries trimmed with records
//	cy:{t:T}:r:expires               zset    reservation id -> expires_at_ms (listing)     entries trimmed with records
//	cy:{t:T}:idem:<endpoint>:<key>   string  idempotency record (id or response)           per endpoint (docs/protocol.md#idempotency-and-replay)
//	cy:{t:T}:ev:<event_id>           hash    direct-debit event record + snapshot          30 d
//	cy:{t:T}:events                  stream  event log (outbox), trimmed by MINID          retention (default 7 d)
//	cy:{t:T}:audit                   stream  audit trail of the tenant, trimmed by MINID   -audit-retention (default 400 d)
//	cy:{audit}:log                   stream  audit trail of non-tenant operations          -audit-retention
//	cy:{audit}:authfail:<minute>     hash    refused authentications per peer, per minute  2 min
//	cy:{bulk}:tenants:<key>          string  answer of a tenant bulk action (idempotency)  15 min
//	cy:tenants                       zset    tenant ids (lex), for sweeper and admin       none
//	cy:ops:sweeper                   hash    sweeper pause flag (paused_at, reason)        none
//	cy:{feed}:log                    stream  all-tenant feed: {t, from, to} ranges         retention (default 7 d)
//	cy:{feed}:marks                  hash    tenant -> last stream id put in the feed      none
//	cy:rl:policies                   hash    rate-limit policy name -> JSON                none
//	cy:rl:{<policy>:<key>}           varies  rate-limit state of one key                   window + slack
//
// Tenant ids match [a-z0-9_.-]{1,128}; scope values [a-zA-Z0-9_.-]{1,128}
// (lowercased); idempotency keys [A-Za-z0-9_.-]{1,256}. None can contain '{',
// '}', ':' or '/', so no input can move a key out of its tenant's slot.
package keys

import "strings"

// Global keys.
const (
	Prefix = "cy:"
	// Tenants is the global tenant registry.
	Tenants = Prefix + "tenants"
	// RateLimitPolicies is the global rate-limit policy table.
	RateLimitPolicies = Prefix + "rl:policies"
	// KeyInvalidations is the pub/sub channel on which a replica that revokes
	// or changes an API key tells every replica to drop it from its
	// verified-key cache (payload "<tenant>/<key id>"; internal/admin).
	KeyInvalidations = Prefix + "ch:key-invalidations"
	// SweeperControl is the sweeper pause flag shared by every replica.
	SweeperControl = Prefix + "ops:sweeper"
	// Feed is the all-tenant event feed: a stream of "tenant t's events in
	// (from, to]" ranges (internal/events/doc.go). Feed and FeedMarks share the
	// hash tag {feed}, so the script that appends to both runs in one slot.
	Feed = Prefix + "{feed}:log"
	// FeedMarks holds, per tenant, the last stream id already in the feed.
	FeedMarks = Prefix + "{feed}:marks"
	// AuditLog is the audit trail of operations that concern no tenant
	// (sweeper controls, refusals of admin calls naming no existing tenant,
	// refused authentications). It shares the hash tag {audit} with
	// AuthFailPrefix, so the script that counts a refused authentication and
	// records it runs in one slot.
	AuditLog = Prefix + "{audit}:log"
	// AuthFailPrefix + <unix minute> counts refused authentications per peer
	// in that minute (lua/audit/auth_refused.lua).
	AuthFailPrefix = Prefix + "{audit}:authfail:"
	// ArchiveLease is the archiver's lease (hash {owner, fence}, with a TTL):
	// one replica archives at a time (lua/archive/lease.lua). ArchiveFence,
	// in the same slot, is the fencing-token counter (no TTL, never reset).
	ArchiveLease = Prefix + "{archive}:lease"
	ArchiveFence = Prefix + "{archive}:fence"
)

// BulkTenants is the idempotency record of a tenant bulk action (a budget
// bulk action's is Tenant.Idempotency("bulk", key), in its tenant's slot).
func BulkTenants(idempotencyKey string) string { return Prefix + "{bulk}:tenants:" + idempotencyKey }

// TenantOfEvents returns the tenant whose event stream key is k
// ("cy:{t:<tenant>}:events").
func TenantOfEvents(k string) (string, bool) {
	rest, ok := strings.CutPrefix(k, Prefix+"{t:")
	if !ok {
		return "", false
	}
	t, ok := strings.CutSuffix(rest, "}:events")
	if !ok || t == "" || strings.ContainsAny(t, "{}:") {
		return "", false
	}
	return t, true
}

// Tenant builds the keys of one tenant.
type Tenant string

// Prefix is "cy:{t:<tenant>}:", the start of every key of the tenant.
func (t Tenant) Prefix() string { return Prefix + "{t:" + string(t) + "}:" }

// key is Prefix() + strings.Join(parts, ":") in one allocation: a reserve
// builds a dozen keys per request.
func (t Tenant) key(parts ...string) string {
	n := len(Prefix) + len("{t:}:") + len(t) + len(parts) - 1
	for _, p := range parts {
		n += len(p)
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteString(Prefix)
	b.WriteString("{t:")
	b.WriteString(string(t))
	b.WriteString("}:")
	for i, p := range parts {
		if i > 0 {
			b.WriteByte(':')
		}
		b.WriteString(p)
	}
	return b.String()
}

// Record is the tenant hash.
func (t Tenant) Record() string { return t.key("tenant") }

// APIKey is the hash of one API key.
func (t Tenant) APIKey(keyID string) string { return t.key("apikey", keyID) }

// APIKeys is the index of the tenant's key ids.
func (t Tenant) APIKeys() string { return t.key("apikeys") }

// Budget is the ledger hash of (scopePath, unit); unit is e.g. "TOKENS".
func (t Tenant) Budget(scopePath, unit string) string { return t.key("b", scopePath, unit) }

// QuotaCounter is a v0.1.26 per_run action-quota counter (lua/lib/quota.lua
// builds the same key): counted is the kind, or "__risk__:<class>" for a
// risk-class counter; window "per_run"; windowKey the run id.
func (t Tenant) QuotaCounter(scopePath, counted, window, windowKey string) string {
	return t.key("q", scopePath+"|"+counted+"|"+window+"|"+windowKey)
}

// QuotaDay is the hash of the tenant's calendar-window quota counters of one
// UTC day (day: the day number since 1970-01-01, decimal); lua/lib/quota.lua
// names its fields and keeps it a hash table (its '_' field is padded past
// hash-max-listpack-value).
func (t Tenant) QuotaDay(day string) string { return t.key("qd", day) }

// PolicyRate is the hash of the tenant's policy rate-limit counters of one
// UTC minute (minute: the minute number since 1970-01-01, decimal);
// lua/lib/policy_rate.lua names its fields.
func (t Tenant) PolicyRate(minute string) string { return t.key("rl", minute) }

// QuotaCounters is the index of the tenant's quota counters (score: expiry ms).
func (t Tenant) QuotaCounters() string { return t.key("qidx") }

// Budgets is the index of the tenant's budgets: members "<scope_path>|<UNIT>".
func (t Tenant) Budgets() string { return t.key("budgets") }

// Policies is the hash of the tenant's scope policies: field = policy id,
// value = the policy as JSON (internal/policy). The runtime reads their
// compiled copy in the tenant record instead (lua/lib/policy.lua).
func (t Tenant) Policies() string { return t.key("pol") }

// BudgetMember is the Budgets index member of (scopePath, unit).
func BudgetMember(scopePath, unit string) string { return scopePath + "|" + unit }

// Reservation is the hash of one reservation.
func (t Tenant) Reservation(id string) string { return t.key("r", id) }

// Deadlines is the sweeper index: ACTIVE reservation id scored by expires_at + grace.
func (t Tenant) Deadlines() string { return t.key("r", "deadline") }

// Quarantine indexes the quarantined ACTIVE reservations: id -> quarantined_at.
func (t Tenant) Quarantine() string { return t.key("r", "quarantine") }

// Created is the listing index: reservation id scored by created_at_ms.
func (t Tenant) Created() string { return t.key("r", "created") }

// Expires is the listing index by expiry: reservation id -> expires_at_ms.
func (t Tenant) Expires() string { return t.key("r", "expires") }

// Idempotency is the idempotency record of key on endpoint (reserve, decide,
// extend:<reservation_id>, event, fund, and the operator's resolve and repair).
func (t Tenant) Idempotency(endpoint, key string) string { return t.key("idem", endpoint, key) }

// Event is the record of one direct-debit event.
func (t Tenant) Event(id string) string { return t.key("ev", id) }

// Events is the tenant's event stream.
func (t Tenant) Events() string { return t.key("events") }

// ArchiveQueue is the tenant's archive queue (stream, one entry {id = the
// reservation id} per settled reservation): appended by the script that
// settles it when an archive is configured (lib/keys.lua key_archive_queue),
// read and trimmed by internal/archiver once PostgreSQL holds the record.
func (t Tenant) ArchiveQueue() string { return t.key("archq") }

// SweepTally is the running outcome count of one sweeper drain of the tenant
// (hash expired/skipped/in_grace/not_found/quarantined/due_before, with a
// TTL): lua/sweeper/expire_batch.lua adds each call's outcomes to it and
// returns the totals, so a call whose reply was lost (a client-side timeout
// after the script ran) still counts (internal/sweeper).
func (t Tenant) SweepTally(drainID string) string { return t.key("sweep", drainID) }

// Audit is the tenant's audit trail (stream, append-only; lua/lib/audit.lua
// derives it from the tenant prefix as prefix .. "audit").
func (t Tenant) Audit() string { return t.key("audit") }
