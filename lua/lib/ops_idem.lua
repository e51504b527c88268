-- lib/ops_idem.lua: idempotency of the operator mutations (ResolveQuarantined,
-- RepairTenant) on the shared record format of lib/idem.lua. Included with
-- "-- include: lib/ops_idem.lua" (see internal/script).
-- include: lib/idem.lua

-- ops_replay: for a key already used, the stored answer as a script result
-- (same payload) or an IDEMPOTENCY_MISMATCH refusal; nil for a new key.
local function ops_replay(idem_key, hash)
  local details = {field = 'idempotency_key'}
  local rec, refusal = idem_check(idem_key, hash, 'idempotency key already used with a different request', details)
  if refusal then return refusal end
  if not rec then return nil end
  if not rec.resp then return fail('INTERNAL_ERROR', 'idempotency record is malformed', details) end
  return {'OK', '{"replay":true,"resp":' .. rec.resp .. '}'}
end

-- ops_remember stores the answer resp (JSON) under the key for ttl_ms.
local function ops_remember(idem_key, hash, resp, ttl_ms)
  idem_put(idem_key, hash, string.format('%.0f', ttl_ms), resp)
end
