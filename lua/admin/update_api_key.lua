-- admin/update_api_key: change an ACTIVE key's attributes in place (its
-- secret, tenant, id and status never change here).
--
-- include: lib/audit.lua
-- Audit: on success, the call's audit entry in the same run (lib/audit.lua).
-- KEYS[1] = API key hash
-- KEYS[2] = tenant event stream
-- ARGV[1] = tenant id
-- ARGV[2] = key id
-- ARGV[3] = event context (internal/eventctx.Arg)
-- ARGV[4..] = field, value pairs to write, checked and encoded in Go: name,
--   description, permissions (JSON array), scope_filter (JSON array),
--   expires_at (ms), metadata (JSON object); '' removes the field. At most
--   the six fields.
-- Result: ok(<API key hash after the write>)
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
for i = 4, #ARGV - 1, 2 do
  if ARGV[i + 1] == '' then
    redis.call('HDEL', KEYS[1], ARGV[i])
  else
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  end
end
redis.call('HSET', KEYS[1], 'updated_at', string.format('%.0f', now))
audit_ok_ev(KEYS[2], ARGV[3])
return ok(hgetall(KEYS[1]))
