#!lua flags=allow-oom
-- admin/revoke_api_key: revoke an API key (idempotent).
--
-- include: lib/audit.lua
-- Audit: on success, the call's audit entry in the same run (lib/audit.lua).
-- KEYS: 1 api_key          API key hash
--       2 event_stream     tenant event stream
-- ARGV: 1 tenant_id        tenant id
--       2 key_id           key id
--       3 event_ctx        event context (internal/eventctx.Arg)
--       4 reason           reason ('' = none; recorded as revoked_reason)
-- JSON admin/revoke_api_key: key revoked_now
-- Result: ok({key = <API key hash after>, revoked_now = bool})
--   Revoking a REVOKED key changes nothing (revoked_now = false, no event).
-- Refusals: KEY_NOT_FOUND.
-- Allowed on SUSPENDED and CLOSED tenants: revocation is a safety action.
-- Events: api_key.revoked (category api_key).

-- Events, refusals and messages name the key by its public id
-- ("<tenant>_<key id>", auth.PublicKeyID), as both wires do.
local public_id = ARGV[1] .. '_' .. ARGV[2]

local k = hgetall(KEYS[1])
if k.status == nil then
  return fail('KEY_NOT_FOUND', 'API key ' .. public_id .. ' not found', {key_id = public_id})
end
if k.status == 'REVOKED' then
  audit_ok_ev(KEYS[2], ARGV[3])
  return ok({key = k, revoked_now = false})
end
local now = now_ms()
redis.call('HSET', KEYS[1], 'status', 'REVOKED', 'revoked_at', string.format('%.0f', now))
if ARGV[4] ~= '' then redis.call('HSET', KEYS[1], 'revoked_reason', ARGV[4]) end
local emit = event_emitter(KEYS[2], ARGV[3], now)
emit('api_key.revoked', 'api_key', 'tenant:' .. ARGV[1],
  {key_id = public_id, key_name = k.name or '', previous_status = k.status, new_status = 'REVOKED'})
audit_ok_ev(KEYS[2], ARGV[3])
return ok({key = hgetall(KEYS[1]), revoked_now = true})
