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
--   INTERNAL_ERROR (malformed stored values, a corrupt balance). Nothing is written when nothing changes.
-- Events: budget.updated (EventDataBudgetLifecycle, operation UPDATE, changed_fields),
--   budget.over_limit_entered/exited when the flag flips.

local scope, unit = ARGV[1], ARGV[2]
local details = {scope = scope, unit = unit}

local b, v = open_budget(KEYS[1], KEYS[2], scope, unit, details)
if not b then return v end
local status = v.status
if status == 'CLOSED' then
  return fail('BUDGET_CLOSED', 'budget is closed', details)
end
local p = cjson.decode(ARGV[3])

local limit, debt = v.overdraft_limit, v.debt
if p.overdraft_limit ~= nil then
  local bad
  limit, bad = amount_arg(p.overdraft_limit, 'overdraft_limit')
  if bad then return bad end
end
if p.commit_overage_policy ~= nil and not POLICIES[p.commit_overage_policy] then
  return fail('INVALID_REQUEST', 'unknown overage policy', {field = 'commit_overage_policy'})
end

local patch = record_patch(b, {bal = true})
local put, changed = patch.put, patch.changed
-- overdraft_limit and the over-limit flag live in the packed balance (one
-- field, rewritten whole below when either changes).
if limit ~= v.overdraft_limit then changed[#changed + 1] = 'overdraft_limit' end
put('commit_overage_policy', p.commit_overage_policy)
if p.caps ~= nil then put('caps', p.caps) end
local del_caps = p.clear_caps and b.caps ~= nil
if del_caps then changed[#changed + 1] = 'caps' end

local meta = merged_metadata(b.metadata, p.metadata, p.replace_metadata)
if meta == false then
  return fail('INTERNAL_ERROR', 'stored budget metadata is malformed', details)
end
put('metadata', meta)

local was_over = v.over
local is_over = i64_cmp(debt, limit) > 0
if was_over ~= is_over then changed[#changed + 1] = 'is_over_limit' end
if limit ~= v.overdraft_limit or was_over ~= is_over then
  put('bal', BAL.pack(status, v.remaining, v.reserved, v.spent, v.allocated, debt, limit, is_over))
end

if #changed == 0 then
  audit_ok_ev(KEYS[3], ARGV[4])
  return ok(b)
end
local now = patch.save(KEYS[2])
if del_caps then redis.call('HDEL', KEYS[2], 'caps') end

-- Amounts do not change on an update; previous and new state are two tables
-- because cjson encoders may reject a table referenced twice.
local function state()
  return {allocated = v.allocated, remaining = v.remaining, debt = debt,
    spent = v.spent, reserved = v.reserved, status = status}
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
