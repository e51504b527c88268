-- policy/update: change fields of a scope policy (docs/protocol.md#policies).
-- include: lib/ledger_util.lua lib/policy.lua lib/audit.lua
-- Audit: on success, the call's audit entry in the same run (lib/audit.lua).
--
-- KEYS: 1 tenant_record
--       2 policies         the tenant's policies hash
--       3 audit_stream     the tenant's audit stream
--       4 event_stream     the tenant's event stream (policy.updated)
-- ARGV: 1 policy_id
--       2 patch            JSON object: the stored fields to replace, each already
--                          validated by internal/policy; absent = unchanged
--       3 event_ctx        event context (internal/eventctx.Arg; carries the audit entry)
-- Result: ok(<the policy as stored after the change>)
-- JSON policy/update: <policy>
-- Refusals: NOT_FOUND (no such policy), TENANT_CLOSED, DUPLICATE_RESOURCE (the
--   new name is taken), INVALID_REQUEST (the effective window would end before
--   it starts, or the policy would hold both an allow and a deny list), INTERNAL_ERROR (a malformed stored policy). Rewrites the policy
--   and the tenant record's compiled copy (lib/policy.lua), or nothing.

local PATCHABLE = {name = true, description = true, priority = true, caps = true, commit_overage_policy = true,
  default_ttl_ms = true, max_ttl_ms = true, max_extensions = true, max_reservations_per_minute = true,
  max_commits_per_minute = true, status = true, effective_from_ms = true, effective_until_ms = true,
  allowed_action_kinds = true, denied_action_kinds = true, action_quotas = true, risk_class_quotas = true}
-- LISTS: the v0.1.26 lists; an empty one clears the stored list (stored absent).
local LISTS = {allowed_action_kinds = true, denied_action_kinds = true, action_quotas = true, risk_class_quotas = true}

local id = ARGV[1]
local patch = jdecode(ARGV[2])
if patch == nil then return fail('INTERNAL_ERROR', 'policy/update: malformed patch') end
local pols = hgetall(KEYS[2])
if pols[id] == nil then return fail('NOT_FOUND', 'policy ' .. id .. ' not found', {policy_id = id}) end
if redis.call('HGET', KEYS[1], 'status') == 'CLOSED' then
  return fail('TENANT_CLOSED', 'the tenant is closed; its policies are read-only', {policy_id = id})
end
local p = jdecode(pols[id])
if p == nil then return fail('INTERNAL_ERROR', 'stored policy ' .. id .. ' is malformed') end

for k, v in pairs(patch) do
  if not PATCHABLE[k] then return fail('INTERNAL_ERROR', 'policy/update: unknown field ' .. k) end
  if LISTS[k] and type(v) == 'table' and next(v) == nil then v = nil end
  p[k] = v
end
-- The lists may not both be set: checked on the result, so a PATCH cannot
-- add an allowlist to a policy that keeps a denylist.
if type(p.allowed_action_kinds) == 'table' and next(p.allowed_action_kinds) ~= nil
  and type(p.denied_action_kinds) == 'table' and next(p.denied_action_kinds) ~= nil then
  local field = patch.allowed_action_kinds and 'allowed_action_kinds' or 'denied_action_kinds'
  return fail('INVALID_REQUEST', 'allowed_action_kinds and denied_action_kinds are mutually exclusive: clear one of them',
    {field = field})
end
if p.effective_from_ms > 0 and p.effective_until_ms > 0 and p.effective_until_ms <= p.effective_from_ms then
  return fail('INVALID_REQUEST', 'effective_until must be after effective_from', {field = 'effective_until'})
end
if patch.name ~= nil then
  local taken = policy_name_taken(pols, p.name, id)
  if taken then return taken end
end

p.updated_at_ms = now_ms()
local raw = cjson.encode(p)
pols[id] = raw
local compiled, cerr = policy_compile(pols)
if compiled == nil then return fail('INTERNAL_ERROR', cerr) end
redis.call('HSET', KEYS[2], id, raw)
policy_store(KEYS[1], compiled)
local changed = {}
for k in pairs(patch) do changed[#changed + 1] = k end
table.sort(changed)
policy_emit(KEYS[4], ARGV[3], 'updated', p, changed)
audit_ok_at(KEYS[3], ARGV[3])
return ok(p)
