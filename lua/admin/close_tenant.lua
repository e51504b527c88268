-- admin/close_tenant: flip a tenant to CLOSED (irreversible). The caller then
-- releases the tenant's open reservations through the ledger's release path.
--
-- include: lib/audit.lua
-- Audit: on success, the call's audit entry in the same run (lib/audit.lua).
-- KEYS: 1 tenant_record     tenant record hash
--       2 event_stream      tenant event stream
-- ARGV: 1 tenant_id         tenant id
--       2 event_ctx         event context (internal/eventctx.Arg)
-- JSON admin/close_tenant: tenant closed_now
-- Result: ok({tenant = <tenant hash after>, closed_now = bool})
--   Closing a CLOSED tenant changes nothing (closed_now = false, no event).
-- Refusals: TENANT_NOT_FOUND.
-- Events: tenant.closed, with correlation id
--   tenant_close_cascade:<tenant>:<request id>, the id its cascade's events
--   carry (ledger/release_for_close), unless the event context sets one (a
--   bulk close: tenant_bulk_action:close:<request id>).

local t = hgetall(KEYS[1])
if t.status == nil then
  return fail('TENANT_NOT_FOUND', 'tenant ' .. ARGV[1] .. ' not found', {tenant_id = ARGV[1]})
end
if t.status == 'CLOSED' then
  audit_ok_ev(KEYS[2], ARGV[2])
  return ok({tenant = t, closed_now = false})
end
local now = now_ms()
local ts = string.format('%.0f', now)
redis.call('HSET', KEYS[1], 'status', 'CLOSED', 'closed_at', ts, 'updated_at', ts)
local emit, ectx = event_emitter(KEYS[2], ARGV[2], now)
local corr = nil
if (ectx.correlation_id or '') == '' then corr = 'tenant_close_cascade:' .. ARGV[1] .. ':' .. (ectx.request_id or '') end
emit('tenant.closed', 'tenant', 'tenant:' .. ARGV[1],
  {tenant_id = ARGV[1], previous_status = t.status, new_status = 'CLOSED'}, corr)
audit_ok_ev(KEYS[2], ARGV[2])
return ok({tenant = hgetall(KEYS[1]), closed_now = true})
