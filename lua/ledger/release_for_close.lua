-- ledger/release_for_close: release up to ARGV[1] ACTIVE reservations of a
-- include: lib/ledger_util.lua lib/ledger_tenant.lua lib/ledger_budget.lua lib/ledger_reservation.lua lib/ledger_release.lua lib/keys.lua
-- CLOSED tenant through the normal release arithmetic (docs/protocol.md#tenants-and-api-keys),
-- bypassing only the TENANT_CLOSED guard. The admin plane calls it repeatedly
-- after flipping the tenant to CLOSED until nothing remains.
-- Each release is final (state RELEASED), so neither the sweeper nor a second
-- call can refund a hold twice. Emits reservation.released_via_tenant_cascade
-- per reservation, with correlation id tenant_close_cascade:<tenant>:<request
-- id> (the cascade's, also inside a bulk close).
--
-- KEYS: 1 tenant_prefix
--       2 tenant_record
--       3 deadlines       the deadline index
--       4 event_stream
-- ARGV: 1 batch_size      1..1000
--       2 event_ctx       event context
--       3 archive         '1' when an archive is configured (finalize in
--                         lib/ledger_reservation.lua), else '' or absent
-- Result: ok({released = n, quarantined = n, remaining = <ids still in the deadline index>})
-- Refusals: INVALID_STATE (tenant record absent or not CLOSED), INTERNAL_ERROR.

local now = now_ms()
local batch = small_int(ARGV[1]) or 100
if batch < 1 then batch = 1 end
if batch > 1000 then batch = 1000 end

local conf, terr = tenant_conf(KEYS[2])
if conf == nil then return fail('INTERNAL_ERROR', terr) end
if not conf.present or conf.status ~= 'CLOSED' then
  return fail('INVALID_STATE', 'tenant must be CLOSED before its reservations are released')
end

local emit, ectx = event_emitter(KEYS[4], ARGV[2], now)
local cascade = 'tenant_close_cascade:' .. key_tenant(KEYS[1]) .. ':' .. (ectx.request_id or '')
local ids = redis.call('ZRANGE', KEYS[3], '0', ms(batch - 1))
local released, quarantined = 0, 0

-- quarantine sets a reservation that cannot be released aside (state and
-- ledger untouched, out of the deadline index, like the sweeper does) so one
-- corrupt record can never stall the cascade or leave a half-written batch.
local function quarantine(key, rid, reason)
  redis.call('HSET', key, 'quarantined_at', ms(now), 'quarantine_reason', reason)
  redis.call('ZREM', KEYS[3], rid)
  quarantined = quarantined + 1
end

for _, rid in ipairs(ids) do
  local key = key_reservation(KEYS[1], rid)
  local r = hgetall(key)
  if next(r) == nil or r.state ~= 'ACTIVE' then
    -- Stale index entry: nothing to release.
    redis.call('ZREM', KEYS[3], rid)
  else
    r.E = i64_norm(r.estimate)
    r.scopes = unpack_budgeted(r.budgeted, r.scope_path)
    if r.E == nil or r.scopes == nil or r.unit == nil then
      quarantine(key, rid, 'CORRUPT_RECORD')
    else
      -- release_hold validates every budget before its first write, so a
      -- refusal here leaves this reservation's budgets untouched.
      local bs, code = release_hold(KEYS[1], r)
      if bs == nil then
        quarantine(key, rid, code)
      else
        -- No release key, so no replay: no answer to keep.
        redis.call('HSET', key, 'state', 'RELEASED', 'finalized_at', ms(now), 'release_reason', 'tenant_closed')
        finalize(KEYS[1], key, KEYS[3], rid, ARGV[3])
        emit('reservation.released_via_tenant_cascade', 'reservation', r.scope_path, {
          reservation_id = rid, scope = r.scope_path, unit = r.unit, released_amount = r.E,
          prior_status = 'ACTIVE', new_status = 'RELEASED', cascade_reason = 'tenant_closed',
        }, cascade)
        released = released + 1
      end
    end
  end
end

return ok({released = released, quarantined = quarantined, remaining = redis.call('ZCARD', KEYS[3])})
