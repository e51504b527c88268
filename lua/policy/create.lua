-- policy/create: add a scope policy to a tenant (docs/protocol.md#policies).
-- include: lib/ledger_util.lua lib/policy.lua lib/audit.lua
-- Audit: on success, the call's audit entry in the same run (lib/audit.lua).
--
-- KEYS: 1 tenant_record
--       2 policies         the tenant's policies hash
--       3 audit_stream     the tenant's audit stream
--       4 event_stream     the tenant's event stream (policy.created)
-- ARGV: 1 policy           JSON, every field of internal/policy's stored form but
--                          created_at_ms, which is Redis TIME here
--       2 max_policies     the most policies one tenant may hold
--       3 event_ctx        event context (internal/eventctx.Arg; carries the audit entry)
-- Result: ok(<the policy as stored>)
-- JSON policy/create: <policy>
-- The stored form of a policy (internal/policy), each a JSON value of the
-- tenant's policies hash:
-- SHAPE policy: policy_id tenant_id name description
--   scope_pattern lua_pattern priority caps commit_overage_policy default_ttl_ms
--   max_ttl_ms max_extensions max_reservations_per_minute max_commits_per_minute
--   status effective_from_ms effective_until_ms created_at_ms updated_at_ms
--   allowed_action_kinds denied_action_kinds
--   action_quotas[]{action_kind risk_class max_calls window ttl_ms threshold_bp hosts domains resources}
--   risk_class_quotas[]{action_kind risk_class max_calls window ttl_ms threshold_bp hosts domains resources}
-- Refusals: TENANT_NOT_FOUND, TENANT_CLOSED, DUPLICATE_RESOURCE (a policy of
--   that name or id exists), LIMIT_EXCEEDED (the tenant holds the most
--   policies), INTERNAL_ERROR (a malformed stored policy). Writes the policy
--   and the tenant record's compiled copy (lib/policy.lua), or nothing.

local p = jdecode(ARGV[1])
local max = tonumber(ARGV[2])
if p == nil or max == nil then return fail('INTERNAL_ERROR', 'policy/create: malformed arguments') end
local status = redis.call('HGET', KEYS[1], 'status')
if not status then
  return fail('TENANT_NOT_FOUND', 'tenant ' .. p.tenant_id .. ' not found', {tenant_id = p.tenant_id})
end
if status == 'CLOSED' then return fail('TENANT_CLOSED', 'the tenant is closed', {tenant_id = p.tenant_id}) end

local pols = hgetall(KEYS[2])
if pols[p.policy_id] then
  return fail('DUPLICATE_RESOURCE', 'policy ' .. p.policy_id .. ' exists', {policy_id = p.policy_id})
end
local taken = policy_name_taken(pols, p.name)
if taken then return taken end
local n = 0
for _ in pairs(pols) do n = n + 1 end
if n >= max then
  return fail('LIMIT_EXCEEDED', 'the tenant holds ' .. n .. ' policies, the most allowed', {field = 'tenant_id'})
end

p.created_at_ms = now_ms()
p.updated_at_ms = 0
local raw = cjson.encode(p)
pols[p.policy_id] = raw
local compiled, cerr = policy_compile(pols)
if compiled == nil then return fail('INTERNAL_ERROR', cerr) end
redis.call('HSET', KEYS[2], p.policy_id, raw)
policy_store(KEYS[1], compiled)
policy_emit(KEYS[4], ARGV[3], 'created', p, nil)
audit_ok_at(KEYS[3], ARGV[3], p.policy_id)
return ok(p)
