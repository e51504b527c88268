-- admin/create_api_key: store a new API key (only the hash of the presented key).
--
-- include: lib/audit.lua
-- Audit: on success, the call's audit entry in the same run (lib/audit.lua).
-- KEYS: 1 tenant_record     tenant record hash
--       2 api_key           API key hash (cy:{t:T}:apikey:<key_id>)
--       3 key_index         the tenant's key index (cy:{t:T}:apikeys, lex zset, score 0)
--       4 event_stream      tenant event stream
-- ARGV: 1 tenant_id         tenant id
--       2 key_id            key id (16 lowercase hex)
--       3 name              name
--       4 key_hash          hex SHA-256 of the full presented key
--       5 event_ctx         event context (internal/eventctx.Arg)
--       6 permissions       permissions (JSON array of Permission values, checked in Go)
--       7 expires_at_ms     expires_at ms ('' = never)
--       8 description       description ('' = none)
--       9 metadata          metadata (JSON object, '' = none)
--       10 scope_filter     scope filter (JSON array of canonical patterns, checked in Go; '' = none)
-- Result: ok(<API key hash after the write>)
-- JSON admin/create_api_key: {*}
-- Refusals: TENANT_NOT_FOUND, TENANT_CLOSED, DUPLICATE_RESOURCE (key id taken),
--   INVALID_REQUEST (expires_at not after the store's clock).
-- Events: api_key.created (category api_key).

-- Events, refusals and messages name the key by its public id
-- ("<tenant>_<key id>", auth.PublicKeyID), as both wires do.
local public_id = ARGV[1] .. '_' .. ARGV[2]

local st = redis.call('HGET', KEYS[1], 'status')
if not st then
  return fail('TENANT_NOT_FOUND', 'tenant ' .. ARGV[1] .. ' not found', {tenant_id = ARGV[1]})
end
if st == 'CLOSED' then
  return fail('TENANT_CLOSED', 'tenant ' .. ARGV[1] .. ' is closed', {tenant_id = ARGV[1]})
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  return fail('DUPLICATE_RESOURCE', 'key id ' .. public_id .. ' already exists', {key_id = public_id})
end
if not string.match(ARGV[4], '^[0-9a-f]+$') or #ARGV[4] ~= 64 then
  return fail('INVALID_REQUEST', 'key hash must be 64 lowercase hex characters', {field = 'hash'})
end

local now = now_ms()
if ARGV[7] ~= '' and tonumber(ARGV[7]) <= now then
  return fail('INVALID_REQUEST', 'expires_at must be in the future', {field = 'expires_at'})
end
local f = {'key_id', ARGV[2], 'tenant_id', ARGV[1], 'name', ARGV[3], 'hash', ARGV[4],
  'status', 'ACTIVE', 'created_at', string.format('%.0f', now), 'permissions', ARGV[6]}
if ARGV[7] ~= '' then f[#f + 1] = 'expires_at'; f[#f + 1] = ARGV[7] end
if ARGV[8] ~= '' then f[#f + 1] = 'description'; f[#f + 1] = ARGV[8] end
if ARGV[9] ~= '' then f[#f + 1] = 'metadata'; f[#f + 1] = ARGV[9] end
if ARGV[10] ~= '' then f[#f + 1] = 'scope_filter'; f[#f + 1] = ARGV[10] end
redis.call('HSET', KEYS[2], unpack(f))
redis.call('ZADD', KEYS[3], 0, ARGV[2])
local emit = event_emitter(KEYS[4], ARGV[5], now)
emit('api_key.created', 'api_key', 'tenant:' .. ARGV[1],
  {key_id = public_id, key_name = ARGV[3], new_status = 'ACTIVE'})
audit_ok_ev(KEYS[4], ARGV[5])
return ok(hgetall(KEYS[2]))
