-- lib/ops_idem.lua: the idempotency record of the operator mutations
-- (ResolveQuarantined, RepairTenant): {h = payload hash, r = answer JSON},
-- one format read and written here only. Included with
-- "-- include: lib/ops_idem.lua" (see pkg/script).

-- ops_replay: for a key already used, the stored answer as a script result
-- (same payload) or an IDEMPOTENCY_MISMATCH refusal; nil for a new key.
local function ops_replay(idem_key, hash)
  local prior = redis.call('GET', idem_key)
  if not prior then return nil end
  local okr, r = pcall(cjson.decode, prior)
  if not okr or type(r) ~= 'table' or type(r.r) ~= 'string' then
    return fail('INTERNAL_ERROR', 'idempotency record is malformed')
  end
  if r.h ~= hash then
    return fail('IDEMPOTENCY_MISMATCH', 'idempotency key already used with a different request', {field = 'idempotency_key'})
  end
  return {'OK', '{"replay":true,"resp":' .. r.r .. '}'}
end

-- ops_remember stores the answer resp (JSON) under the key for ttl_ms.
local function ops_remember(idem_key, hash, resp, ttl_ms)
  redis.call('SET', idem_key, cjson.encode({h = hash, r = resp}), 'PX', string.format('%.0f', ttl_ms))
end
