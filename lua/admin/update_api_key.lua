-- admin/update_api_key: change an ACTIVE key's attributes in place (its
-- secret, tenant, id and status never change here).
--
-- include: lib/audit.lua
-- Audit: on success, the call's audit entry in the same run (lib/audit.lua).
-- KEYS: 1 api_key           API key hash
--       2 event_stream      tenant event stream (api_key.permissions_changed when the
--                           permissions or the scope filter change)
-- ARGV: 1 tenant_id         tenant id
--       2 key_id            key id
--       3 event_ctx         event context (internal/eventctx.Arg)
--       4.. field_pairs     field, value pairs to write, checked and encoded in Go: name,
--                           description, permissions (JSON array), scope_filter (JSON array),
--                           expires_at (ms), metadata (JSON object); '' removes the field. At most
--                           the six fields.
-- Result: ok(<API key hash after the write>)
-- JSON admin/update_api_key: {*}
-- Refusals: KEY_NOT_FOUND; INVALID_STATE (REVOKED, or expired by the store's
--   clock: such a key cannot be changed); INVALID_REQUEST (an unknown field,
--   expires_at not after the store's clock).
-- Allowed on SUSPENDED and CLOSED tenants, like revocation: narrowing a key
-- is a safety action.

-- Events, refusals and messages name the key by its public id
-- ("<tenant>_<key id>", auth.PublicKeyID), as both wires do.
local public_id = ARGV[1] .. '_' .. ARGV[2]

local k = redis.call('HMGET', KEYS[1], 'status', 'expires_at')
if not k[1] then
  return fail('KEY_NOT_FOUND', 'API key ' .. public_id .. ' not found', {key_id = public_id})
end
local now = now_ms()
if k[1] ~= 'ACTIVE' then
  return fail('INVALID_STATE', 'API key ' .. public_id .. ' is revoked and cannot be changed', {key_id = public_id})
end
if k[2] and k[2] ~= '' and tonumber(k[2]) <= now then
  return fail('INVALID_STATE', 'API key ' .. public_id .. ' has expired and cannot be changed', {key_id = public_id})
end
local allowed = {name = true, description = true, permissions = true, scope_filter = true,
  expires_at = true, metadata = true}
if #ARGV > 3 + 12 then
  return fail('INVALID_REQUEST', 'too many fields', {field = 'fields'})
end
for i = 4, #ARGV - 1, 2 do
  local f, v = ARGV[i], ARGV[i + 1]
  if not allowed[f] then
    return fail('INVALID_REQUEST', 'field ' .. f .. ' cannot be changed', {field = f})
  end
  if f == 'expires_at' and v ~= '' and (tonumber(v) or 0) <= now then
    return fail('INVALID_REQUEST', 'expires_at must be in the future', {field = 'expires_at'})
  end
end
-- The access fields before the write, to tell which of them change.
local before = redis.call('HMGET', KEYS[1], 'permissions', 'scope_filter')
local access = {permissions = before[1] or '', scope_filter = before[2] or ''}
local changed = {}
for i = 4, #ARGV - 1, 2 do
  if access[ARGV[i]] ~= nil and access[ARGV[i]] ~= ARGV[i + 1] then changed[#changed + 1] = ARGV[i] end
end
table.sort(changed)
for i = 4, #ARGV - 1, 2 do
  if ARGV[i + 1] == '' then
    redis.call('HDEL', KEYS[1], ARGV[i])
  else
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  end
end
redis.call('HSET', KEYS[1], 'updated_at', string.format('%.0f', now))
if #changed > 0 then
  event_emitter(KEYS[2], ARGV[3], now)('api_key.permissions_changed', 'api_key', 'tenant:' .. ARGV[1],
    {key_id = public_id, key_name = redis.call('HGET', KEYS[1], 'name') or '', previous_status = 'ACTIVE',
     new_status = 'ACTIVE', changed_fields = changed})
end
audit_ok_ev(KEYS[2], ARGV[3])
return ok(hgetall(KEYS[1]))
