#!lua flags=allow-oom
-- ledger/release: return a reservation's whole hold (docs/protocol.md#release).
-- include: lib/ledger_util.lua lib/ledger_tenant.lua lib/ledger_budget.lua lib/ledger_reservation.lua lib/ledger_release.lua
-- No events are emitted on release (REF).
--
-- KEYS: 1 tenant prefix   2 tenant record   3 reservation hash   4 deadline index
--   Budget hashes are derived from the record (KEYS[1] .. 'b:' .. scope .. ':' .. unit).
-- ARGV: 1 reservation id   2 idempotency key   3 payload hash   4 reason
--       Extra ARGV are ignored (time always comes from Redis TIME).
-- Result: ok({replay = bool, resp = <snapshot JSON>})
--   snapshot: {status = 'RELEASED', unit, released, balances}, rebuilt on
--   replay from the record (estimate, balance rows lb<i>; records released
--   before keep a `release_resp` copy).
-- Refusals: NOT_FOUND, IDEMPOTENCY_MISMATCH, TENANT_CLOSED, RESERVATION_EXPIRED,
--   RESERVATION_FINALIZED, AMOUNT_OVERFLOW, INTERNAL_ERROR.

-- release_snapshot is the release's answer (strings as stored; a replay
-- rebuilds it from the record with the same function).
local function release_snapshot(unit, E, balances)
  return cjson.encode({status = 'RELEASED', unit = unit, released = E, balances = balances})
end

local now = now_ms()
local rid, idem_key, hash = ARGV[1], ARGV[2], ARGV[3]

local r = hgetall(KEYS[3])
if next(r) == nil then return fail('NOT_FOUND', 'reservation ' .. rid .. ' not found') end

if r.state == 'RELEASED' and r.release_key == idem_key then
  if r.release_hash ~= hash then
    return fail('IDEMPOTENCY_MISMATCH', 'idempotency key was used with a different release')
  end
  local snap = r.release_resp
  if not snap then
    local E = i64_norm(r.estimate or '')
    local bal = record_replay().balances_in(r, 'lb', unpack_budgeted(r.budgeted, r.scope_path) or {})
    if E == nil or bal == nil or r.unit == nil then
      return fail('INTERNAL_ERROR', 'release replay unavailable: the reservation record is corrupt')
    end
    snap = release_snapshot(r.unit, E, bal)
  end
  return ok({replay = true, resp = snap})
end

local code, msg
r, code, msg = load_reservation(r, KEYS[2])
if r == nil then return fail(code, msg) end
if now > r.n_expires + r.n_grace then
  return fail('RESERVATION_EXPIRED', 'reservation expired at ' .. r.expires_at .. ' (+' .. r.grace_ms .. ' ms grace)')
end

local bs
bs, code, msg = release_hold(KEYS[1], r)
if bs == nil then return fail(code, msg) end

local balances = snapshots(bs)
local snap = release_snapshot(r.unit, r.E, balances)
-- The answer's balance rows lb<i> (docs/design.md#reservation-records).
redis.call('HSET', KEYS[3], unpack(balance_fields({'state', 'RELEASED', 'finalized_at', ms(now),
  'release_key', idem_key, 'release_hash', hash, 'release_reason', ARGV[4]}, 'lb', balances, r.scopes)))
finalize(KEYS[3], KEYS[4], rid)

return ok({replay = false, resp = snap})
