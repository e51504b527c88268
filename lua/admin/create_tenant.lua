-- admin/create_tenant: create a tenant record (status ACTIVE).
--
-- include: lib/audit.lua
-- Audit: on success, the call's audit entry in the same run (lib/audit.lua).
-- KEYS: 1 tenant_record      tenant record hash (cy:{t:T}:tenant)
--       2 event_stream       tenant event stream (cy:{t:T}:events)
-- ARGV: 1 tenant_id          tenant id
--       2 name               name
--       3 default_policy     default overage policy (REJECT|ALLOW_IF_AVAILABLE|ALLOW_WITH_OVERDRAFT)
--       4 default_ttl_ms     default reservation ttl ms (decimal)
--       5 max_ttl_ms         max reservation ttl ms (decimal, 0 = no cap)
--       6 max_extensions     max reservation extensions (decimal)
--       7 metadata           metadata (JSON object of strings)
--       8 event_ctx          event context (internal/eventctx.Arg)
-- Result: ok(<tenant hash after the write>)
-- JSON admin/create_tenant: {*}
-- Refusals: DUPLICATE_RESOURCE (record exists), INVALID_REQUEST (malformed ARGV).
-- created_at/updated_at come from Redis TIME; extra ARGV are ignored.

local POLICIES = {REJECT = true, ALLOW_IF_AVAILABLE = true, ALLOW_WITH_OVERDRAFT = true}

if redis.call('EXISTS', KEYS[1]) == 1 then
  return fail('DUPLICATE_RESOURCE', 'tenant ' .. ARGV[1] .. ' already exists', {tenant_id = ARGV[1]})
end
if not POLICIES[ARGV[3]] then
  return fail('INVALID_REQUEST', 'unknown overage policy', {field = 'default_commit_overage_policy'})
end
local fields = {default_ttl_ms = ARGV[4], max_ttl_ms = ARGV[5], max_extensions = ARGV[6]}
for name, v in pairs(fields) do
  local n = i64_norm(v)
  if n == nil or string.sub(n, 1, 1) == '-' then
    return fail('INVALID_REQUEST', name .. ' must be a non-negative integer', {field = name})
  end
  fields[name] = n
end

local now = now_ms()
local ts = string.format('%.0f', now)
redis.call('HSET', KEYS[1],
  'tenant_id', ARGV[1], 'name', ARGV[2], 'status', 'ACTIVE', 'default_policy', ARGV[3],
  'default_ttl_ms', fields.default_ttl_ms, 'max_ttl_ms', fields.max_ttl_ms,
  'max_extensions', fields.max_extensions, 'created_at', ts, 'updated_at', ts,
  'metadata', ARGV[7])

local emit = event_emitter(KEYS[2], ARGV[8], now)
emit('tenant.created', 'tenant', 'tenant:' .. ARGV[1],
  {tenant_id = ARGV[1], new_status = 'ACTIVE'})
audit_ok_ev(KEYS[2], ARGV[8])
return ok(hgetall(KEYS[1]))
