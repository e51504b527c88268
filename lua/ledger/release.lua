#!lua flags=allow-oom
-- ledger/release: return a reservation's whole hold (docs/protocol.md#release).
-- include: lib/ledger_util.lua lib/ledger_tenant.lua lib/ledger_budget.lua lib/ledger_reservation.lua lib/ledger_release.lua lib/ledger_snapshot.lua lib/audit.lua lib/scope_filter.lua
-- No events are emitted on release (REF).
--
-- KEYS: 1 tenant_prefix
--       2 tenant_record
--       3 reservation       the reservation hash
--       4 deadlines         the deadline index
--                           Budget hashes are derived from the record
--                           (KEYS[1] .. 'b:' .. scope .. ':' .. unit).
-- ARGV: 1 reservation_id
--       2 idempotency_key
--       3 payload_hash
--       4 reason
--       5 audit_ctx         event context with an audit entry (internal/eventctx.Arg),
--                           only when the call is audited (the admin key acting
--                           for the tenant): the release appends it to the
--                           tenant's audit stream (lib/audit.lua); '' when not audited
--       6 archive           '1' when an archive is configured (finalize in
--                           lib/ledger_reservation.lua), else '' or absent
--       7 scope_filter      of the caller's API key (scopefilter.ScriptArg; ''
--                           none): a reservation outside it is refused before
--                           anything else, replays included
--       8.. archived_pairs  an archived record's field/value pairs (at most 128
--                           pairs), only when internal/ledger found the hash gone
--                           and the reservation in the PostgreSQL archive: read
--                           only when the hash does not exist; the script then
--                           answers a replay from them, or refuses exactly as for
--                           the settled hash, and writes nothing.
-- Result: okf({'OK', FLAT_V, '', '', replay (0|1), <release snapshot fields>})
--   (lib/ledger_snapshot.lua: unit, released, balances), rebuilt on replay
--   from the record (estimate, balance rows lb<i>).
-- Refusals: NOT_FOUND, FORBIDDEN (scope_filter), IDEMPOTENCY_MISMATCH, TENANT_CLOSED, RESERVATION_EXPIRED,
--   RESERVATION_FINALIZED, AMOUNT_OVERFLOW, INTERNAL_ERROR.

local now = now_ms()
local rid, idem_key, hash = ARGV[1], ARGV[2], ARGV[3]

local r, archived = hgetall(KEYS[3]), false
if next(r) == nil then
  r, archived = archived_fields(8), true
  if r == nil then return fail('NOT_FOUND', 'reservation ' .. rid .. ' not found') end
end
local denied = scope_filter_refusal(ARGV[7], r.scope_path)
if denied then return denied end

if r.state == 'RELEASED' and r.release_key == idem_key then
  if r.release_hash ~= hash then
    return fail('IDEMPOTENCY_MISMATCH', 'idempotency key was used with a different release')
  end
  local E = i64_norm(r.estimate or '')
  local paths, packed = record_replay().packed_rows(r, 'lb', unpack_budgeted(r.budgeted, r.scope_path) or {}, true)
  if E == nil or packed == nil or r.unit == nil then
    return fail('INTERNAL_ERROR', 'release replay unavailable: the reservation record is corrupt')
  end
  local out = {'OK', FLAT_V, '', '', 1, r.unit, E}
  push_packed(out, paths, packed)
  return okf(out)
end

local code, msg
r, code, msg = load_reservation(r, KEYS[2])
if r == nil then return fail(code, msg) end
if archived then return fail('INTERNAL_ERROR', 'archived reservation ' .. rid .. ' is not settled') end
if now > r.n_expires + r.n_grace then
  return fail('RESERVATION_EXPIRED', 'reservation expired at ' .. r.expires_at .. ' (+' .. r.grace_ms .. ' ms grace)')
end

local bs
bs, code, msg = release_hold(KEYS[1], r)
if bs == nil then return fail(code, msg) end

-- The balances after the refund, from the values release_hold wrote (b.new_rem,
-- b.new_res: lib/refund.lua) rather than a second read of every budget.
local balances = {nil, nil, nil}
for i = 1, #bs do
  local b = bs[i]
  balances[i] = balance_now(b, b.new_rem, b.new_res)
end
-- The answer's balance rows lb<i> (docs/design.md#reservation-records); a
-- replay packs them as push_rows packs balances.
redis.call('HSET', KEYS[3], unpack(balance_fields({'state', 'RELEASED', 'finalized_at', ms(now),
  'release_key', idem_key, 'release_hash', hash, 'release_reason', ARGV[4]}, 'lb', balances, r.scopes)))
finalize(KEYS[1], KEYS[3], KEYS[4], rid, ARGV[6])

if ARGV[5] and ARGV[5] ~= '' then audit_ok(KEYS[1], ARGV[5]) end
local out = {'OK', FLAT_V, '', '', 0, r.unit, r.E}
push_rows(out, balances)
return okf(out)
