#!lua flags=no-writes
-- admin/get_tenant: read a tenant record.
--
-- KEYS: 1 tenant_record     tenant record hash
-- ARGV: 1 tenant_id         tenant id (for the refusal message)
-- Result: ok(<tenant hash>)
-- JSON admin/get_tenant: {*}
-- Refusals: TENANT_NOT_FOUND.

local t = hgetall(KEYS[1])
if t.status == nil then
  return fail('TENANT_NOT_FOUND', 'tenant ' .. ARGV[1] .. ' not found', {tenant_id = ARGV[1]})
end
return ok(t)
