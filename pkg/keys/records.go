package keys

// Record layouts: the fields every script agrees on. Amounts are canonical
// decimal strings (int64, written with HINCRBY or from int64.lua results);
// times are integer milliseconds from Redis TIME; enums are the proto value
// names without their prefix (ACTIVE, TOKENS, ALLOW_IF_AVAILABLE, ...).
//
// Tenant hash (Tenant.Record):
//
//	tenant_id, name, status (ACTIVE|SUSPENDED|CLOSED), default_policy,
//	default_ttl_ms, max_ttl_ms (0 = no cap), max_extensions, created_at,
//	updated_at, closed_at, metadata (JSON object)
//
// API key hash (Tenant.APIKey):
//
//	key_id, tenant_id, name, hash (hex SHA-256 of the presented key),
//	status (ACTIVE|REVOKED), created_at, revoked_at
//
// Budget hash (Tenant.Budget):
//
//	scope_path, unit, allocated, remaining, reserved, spent, debt,
//	overdraft_limit, is_over_limit ("true"|"false"), status
//	(ACTIVE|FROZEN|CLOSED), commit_overage_policy, caps (JSON Caps, absent =
//	none), created_at, updated_at, metadata (JSON object)
//	Invariant: remaining = allocated - spent - reserved - debt.
//
// Reservation hash (Tenant.Reservation):
//
//	id, state (ACTIVE|COMMITTED|RELEASED|EXPIRED), unit, estimate,
//	scope_path, budgeted (JSON array of scope paths that held a budget in unit
//	at reserve time), created_at, expires_at, grace_ms, policy (resolved
//	overage policy), max_ext, ext_count, idem_key, subject (JSON), action
//	(JSON), metadata (JSON), rbal (the reserve answer's balances, packed),
//	caps (only when the answer had caps), affected (JSON array; only when not
//	the scope path's prefixes), exp0 (the answered expiry, set by the first
//	extend); metadata, committed_metadata and metrics only when not empty.
//	Records written before the compaction carry reserve_resp
//	(replay snapshot), affected and tenant (unread); readers accept both
//	(docs/design.md#reservation-records).
//	on commit:  charged, debt_incurred, finalized_at, commit_key, commit_hash,
//	            cbal (the commit answer's balances, packed; formerly
//	            commit_resp), committed_metadata (JSON), metrics (JSON)
//	on release: finalized_at, release_key, release_hash, release_resp, release_reason
//	on expiry:  expired_at
//	quarantine: quarantined_at, quarantine_reason (the id is then in
//	            Tenant.Quarantine, out of Tenant.Deadlines); once an operator
//	            resolves it (OpsService.ResolveQuarantined): quarantine_resolution
//	            (RELEASED|EXPIRED|REQUEUED), and release_reason "operator: ..."
//	While ACTIVE the id is in Tenant.Deadlines scored expires_at + grace_ms;
//	terminal records get PEXPIRE TerminalRetentionMs.
//
// Event stream entry (Tenant.Events), appended by emit_event in lua/lib/core.lua:
//
//	id, type, cat, ts, scope, actor, key_id, req, trace, src, data (JSON)

// TerminalRetentionMs is how long COMMITTED/RELEASED/EXPIRED records (and
// direct-debit event records) are kept: 30 days.
const TerminalRetentionMs = 30 * 24 * 60 * 60 * 1000
