-- admin/update_budget: change overdraft_limit, commit_overage_policy, caps and
-- metadata of a budget; allowed while FROZEN, refused once CLOSED. Recomputes
-- is_over_limit = debt > overdraft_limit (which also clears a stale flag).
--
-- include: lib/ledger_util.lua lib/audit.lua lib/admin_record.lua
-- Audit: on success, the call's audit entry in the same run (lib/audit.lua).
-- KEYS: 1 tenant_record     tenant record hash
--       2 budget            budget hash
--       3 event_stream      tenant event stream
-- ARGV: 1 scope_path        canonical scope path
--       2 unit              unit
--       3 patch             patch (JSON object; absent members are left unchanged):
--                           {overdraft_limit (decimal string), commit_overage_policy,
--                           caps (JSON text), clear_caps (bool), metadata (object of strings),
--                           replace_metadata (bool)}
--       4 event_ctx         event context (internal/eventctx.Arg)
-- Result: ok(<budget hash after>)
-- JSON admin/update_budget: {*}
-- Refusals: TENANT_CLOSED, BUDGET_NOT_FOUND, BUDGET_CLOSED, INVALID_REQUEST,
--   INTERNAL_ERROR (malformed stored values). Nothing is written when nothing changes.
-- Events: budget.updated (EventDataBudgetLifecycle, operation UPDATE, changed_fields),
--   budget.over_limit_entered/exited when the flag flips.

local scope, unit = ARGV[1], ARGV[2]
local details = {scope = scope, unit = unit}

local b, refusal = open_budget(KEYS[1], KEYS[2], scope, unit, details)
if not b then return refusal end
local status = b.status or 'ACTIVE'
if status == 'CLOSED' then
  return fail('BUDGET_CLOSED', 'budget is closed', details)
end
local p = cjson.decode(ARGV[3])

local limit = i64_norm(b.overdraft_limit)
local debt = i64_norm(b.debt)
if limit == nil or debt == nil then
  return fail('INTERNAL_ERROR', 'budget debt or overdraft_limit is not an int64', details)
end
if p.overdraft_limit ~= nil then
  local bad
  limit, bad = amount_arg(p.overdraft_limit, 'overdraft_limit')
  if bad then return bad end
end
if p.commit_overage_policy ~= nil and not POLICIES[p.commit_overage_policy] then
  return fail('INVALID_REQUEST', 'unknown overage policy', {field = 'commit_overage_policy'})
end

local patch = record_patch(b)
local put, changed = patch.put, patch.changed
put('overdraft_limit', p.overdraft_limit and limit or nil)
put('commit_overage_policy', p.commit_overage_policy)
if p.caps ~= nil then put('caps', p.caps) end
local del_caps = p.clear_caps and b.caps ~= nil
if del_caps then changed[#changed + 1] = 'caps' end

local meta = merged_metadata(b.metadata, p.metadata, p.replace_metadata)
if meta == false then
  return fail('INTERNAL_ERROR', 'stored budget metadata is malformed', details)
end
put('metadata', meta)

local was_over = (b.is_over_limit == 'true')
local is_over = i64_cmp(debt, limit) > 0
if was_over ~= is_over then put('is_over_limit', is_over and 'true' or 'false') end

if #changed == 0 then
  audit_ok_ev(KEYS[3], ARGV[4])
  return ok(b)
end
local now = patch.save(KEYS[2])
if del_caps then redis.call('HDEL', KEYS[2], 'caps') end

-- Amounts do not change on an update; previous and new state are two tables
-- because cjson encoders may reject a table referenced twice.
local function state()
  return {allocated = b.allocated or '0', remaining = b.remaining or '0', debt = debt,
    spent = b.spent or '0', reserved = b.reserved or '0', status = status}
end
local emit = event_emitter(KEYS[3], ARGV[4], now)
emit('budget.updated', 'budget', scope, {ledger_id = scope .. '|' .. unit, scope = scope,
  unit = unit, operation = 'UPDATE', previous_state = state(), new_state = state(),
  changed_fields = changed})
if was_over ~= is_over then
  emit(is_over and 'budget.over_limit_entered' or 'budget.over_limit_exited', 'budget', scope,
    {scope = scope, unit = unit, debt = debt, overdraft_limit = limit, is_over_limit = is_over})
end
audit_ok_ev(KEYS[3], ARGV[4])
return ok(hgetall(KEYS[2]))
