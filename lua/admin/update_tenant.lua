-- admin/update_tenant: change a tenant's name, defaults, metadata and
-- ACTIVE <-> SUSPENDED status. CLOSED is terminal (CloseTenant only).
--
-- include: lib/audit.lua lib/admin_record.lua
-- Audit: on success, the call's audit entry in the same run (lib/audit.lua).
-- KEYS: 1 tenant_record     tenant record hash
--       2 event_stream      tenant event stream
-- ARGV: 1 tenant_id         tenant id
--       2 patch             patch (JSON object; absent members are left unchanged):
--                           {name, default_policy, default_ttl_ms, max_ttl_ms, max_extensions
--                           (decimal strings), status (ACTIVE|SUSPENDED), metadata (object of
--                           strings), replace_metadata (bool: metadata replaces instead of merging),
--                           observe_mode (DISABLED|OBSERVE|ENFORCE; v0.1.26, absent in a record = ENFORCE)}
--       3 event_ctx         event context (internal/eventctx.Arg)
-- Result: ok(<tenant hash after the update>)
-- JSON admin/update_tenant: {*}
-- Refusals: TENANT_NOT_FOUND, TENANT_CLOSED, INVALID_REQUEST, INTERNAL_ERROR
-- (malformed stored metadata). Nothing is written when nothing changes.
-- Events: tenant.suspended / tenant.reactivated on a status change,
-- tenant.updated (changed_fields) when any other field changes.

local POLICIES = {REJECT = true, ALLOW_IF_AVAILABLE = true, ALLOW_WITH_OVERDRAFT = true}

local t = hgetall(KEYS[1])
if t.status == nil then
  return fail('TENANT_NOT_FOUND', 'tenant ' .. ARGV[1] .. ' not found', {tenant_id = ARGV[1]})
end
if t.status == 'CLOSED' then
  return fail('TENANT_CLOSED', 'tenant ' .. ARGV[1] .. ' is closed', {tenant_id = ARGV[1]})
end
local p = cjson.decode(ARGV[2])

-- A status change is its own event (tenant.suspended / reactivated), not a
-- changed field.
local patch = record_patch(t, {status = true})
local put, changed = patch.put, patch.changed

if p.default_policy ~= nil and not POLICIES[p.default_policy] then
  return fail('INVALID_REQUEST', 'unknown overage policy', {field = 'default_commit_overage_policy'})
end
local OBSERVE_MODES = {DISABLED = true, OBSERVE = true, ENFORCE = true}
if p.observe_mode ~= nil and not OBSERVE_MODES[p.observe_mode] then
  return fail('INVALID_REQUEST', 'observe_mode must be DISABLED, OBSERVE or ENFORCE', {field = 'observe_mode'})
end
if p.status ~= nil and p.status ~= 'ACTIVE' and p.status ~= 'SUSPENDED' then
  return fail('INVALID_REQUEST', 'status must be ACTIVE or SUSPENDED (use CloseTenant to close)', {field = 'status'})
end
for _, name in ipairs({'default_ttl_ms', 'max_ttl_ms', 'max_extensions'}) do
  if p[name] ~= nil then
    local n = i64_norm(p[name])
    if n == nil or string.sub(n, 1, 1) == '-' then
      return fail('INVALID_REQUEST', name .. ' must be a non-negative integer', {field = name})
    end
    p[name] = n
  end
end

-- The plain fields, in the order tenant.updated lists them as changed.
for _, name in ipairs({'name', 'default_policy', 'default_ttl_ms', 'max_ttl_ms', 'max_extensions', 'status'}) do
  put(name, p[name])
end
-- A tenant stored without observe_mode enforces: setting ENFORCE changes nothing.
if p.observe_mode ~= nil and (t.observe_mode or 'ENFORCE') ~= p.observe_mode then put('observe_mode', p.observe_mode) end

-- Metadata: merge the given entries, or replace the whole map.
local meta = merged_metadata(t.metadata, p.metadata, p.replace_metadata)
if meta == false then
  return fail('INTERNAL_ERROR', 'stored tenant metadata is malformed', {tenant_id = ARGV[1]})
end
put('metadata', meta)

if #patch.set == 0 then
  audit_ok_ev(KEYS[2], ARGV[3])
  return ok(t)
end

local now = patch.save(KEYS[1])

local emit = event_emitter(KEYS[2], ARGV[3], now)
local scope = 'tenant:' .. ARGV[1]
if p.status ~= nil and p.status ~= t.status then
  local ev = (p.status == 'SUSPENDED') and 'tenant.suspended' or 'tenant.reactivated'
  emit(ev, 'tenant', scope, {tenant_id = ARGV[1], previous_status = t.status, new_status = p.status})
end
if #changed > 0 then
  emit('tenant.updated', 'tenant', scope, {tenant_id = ARGV[1], previous_status = t.status,
    new_status = p.status or t.status, changed_fields = changed})
end
audit_ok_ev(KEYS[2], ARGV[3])
return ok(hgetall(KEYS[1]))
