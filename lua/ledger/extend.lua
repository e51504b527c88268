-- ledger/extend: move an ACTIVE reservation's expiry forward (docs/protocol.md#extend).
-- include: lib/ledger_util.lua lib/idem.lua lib/ledger_tenant.lua lib/ledger_budget.lua lib/ledger_reservation.lua lib/ledger_snapshot.lua lib/keys.lua lib/scope_filter.lua
-- New expires_at = current expires_at + extend_by_ms; accepted only while
-- now <= expires_at (no grace) and ext_count < max_ext. No clamp, no events.
--
-- KEYS: 1 tenant_prefix
--       2 tenant_record
--       3 reservation       the reservation hash
--       4 deadlines         the deadline index
--       5 expires_index
--       6 idem_record       idempotency record (endpoint "extend:<reservation id>")
-- ARGV: 1 reservation_id
--       2 extend_by_ms
--       3 idempotency_key
--       4 payload_hash
--       5 metadata          JSON or ''
--       6 scope_filter      of the caller's API key (scopefilter.ScriptArg; ''
--                           none): a reservation outside it (or one whose record
--                           is gone) is refused before anything else, replays
--                           included. Extra ARGV are ignored (time always comes
--                           from Redis TIME).
-- Result: okf({'OK', FLAT_V, '', '', replay (0|1), rem_ttl ('<ms>'), <extend snapshot fields>})
--   (lib/ledger_snapshot.lua), from the snapshot the idempotency record keeps
--   as JSON (`resp`: {status = 'ACTIVE', unit, expires_at_ms, balances, extension_count}).
-- Refusals: INVALID_REQUEST, NOT_FOUND, FORBIDDEN (scope_filter), IDEMPOTENCY_MISMATCH, TENANT_CLOSED,
--   RESERVATION_EXPIRED, RESERVATION_FINALIZED, MAX_EXTENSIONS_EXCEEDED, INTERNAL_ERROR.

local now = now_ms()
local rid, hash = ARGV[1], ARGV[4]
local by = small_int(ARGV[2])
if by == nil or by < 1 then
  return fail('INVALID_REQUEST', 'extend_by_ms must be a positive integer', {field = 'extend_by_ms'})
end

-- A filtered key: the record's scope decides first (fail closed: no record,
-- no replay).
if ARGV[6] and ARGV[6] ~= '' then
  local path = redis.call('HGET', KEYS[3], 'scope_path')
  if not path then return fail('NOT_FOUND', 'reservation ' .. rid .. ' not found') end
  local denied = scope_filter_refusal(ARGV[6], path)
  if denied then return denied end
end

-- Replay: (tenant, reservation, key) -> stored response; remaining_ttl_ms is
-- recomputed from the stored expiry, 0 once the reservation is no longer ACTIVE.
local rec, refusal = idem_check(KEYS[6], hash, 'idempotency key was used with a different extend')
if refusal then return refusal end
if rec then
  local snap = jdecode(rec.resp)
  if snap == nil then return fail('INTERNAL_ERROR', 'idempotency record is corrupt') end
  local rem = 0
  if snap and redis.call('HGET', KEYS[3], 'state') == 'ACTIVE' then
    rem = math.max(0, (tonumber(snap.expires_at_ms) or 0) - now)
  end
  return okf(extend_reply_of({'OK', FLAT_V, '', '', 1, ms(rem)}, snap))
end

local r = hgetall(KEYS[3])
if next(r) == nil then return fail('NOT_FOUND', 'reservation ' .. rid .. ' not found') end
local code, msg
r, code, msg = load_reservation(r, KEYS[2])
if r == nil then return fail(code, msg) end
if now > r.n_expires then
  return fail('RESERVATION_EXPIRED', 'reservation expired at ' .. r.expires_at .. '; extend allows no grace')
end
local count, max_ext = small_int(r.ext_count or '0'), small_int(r.max_ext or '10')
if count == nil or max_ext == nil then return fail('INTERNAL_ERROR', 'reservation record is corrupt') end
if count >= max_ext then
  return fail('MAX_EXTENSIONS_EXCEEDED', 'reservation was already extended ' .. ms(count) .. ' times (max ' .. ms(max_ext) .. ')',
    {extension_count = ms(count), max_extensions = ms(max_ext)})
end

local bs, berr = reservation_budgets(KEYS[1], r)
if bs == nil then return fail('INTERNAL_ERROR', berr) end

local expires_at = r.n_expires + by
count = count + 1
-- The reserve's replay answers with the original expiry (exp0, kept once).
redis.call('HSETNX', KEYS[3], 'exp0', r.expires_at)
redis.call('HSET', KEYS[3], 'expires_at', ms(expires_at), 'ext_count', ms(count))
if ARGV[5] ~= '' then redis.call('HSET', KEYS[3], 'extend_metadata', ARGV[5]) end
redis.call('ZADD', KEYS[4], ms(expires_at + r.n_grace), rid)
redis.call('ZADD', KEYS[5], ms(expires_at), rid)

-- Keep the reserve idempotency mapping alive while the reservation can still
-- be settled, so a late retry of the create replays instead of double-reserving.
local rkey = key_idem(KEYS[1], 'reserve', r.idem_key or '')
local need = expires_at + r.n_grace - now
local pttl = redis.call('PTTL', rkey)
if r.idem_key and pttl >= 0 and pttl < need then redis.call('PEXPIRE', rkey, ms(need)) end

local resp = {status = 'ACTIVE', unit = r.unit, expires_at_ms = ms(expires_at),
  balances = snapshots(bs), extension_count = ms(count)}
local snap = cjson.encode(resp)
idem_put(KEYS[6], hash, ms(math.max(need, 1000)), snap)

return okf(extend_reply_of({'OK', FLAT_V, '', '', 0, ms(expires_at - now)}, resp))
