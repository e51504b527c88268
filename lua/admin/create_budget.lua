-- admin/create_budget: create the ledger of one (scope, unit).
--
-- include: lib/ledger_util.lua lib/audit.lua
-- Audit: on success, the call's audit entry in the same run (lib/audit.lua).
-- KEYS: 1 tenant_record             tenant record hash
--       2 budget                    budget hash (cy:{t:T}:b:<scope_path>:<UNIT>)
--       3 budget_index              the tenant's budget index (cy:{t:T}:budgets, members "<scope_path>|<UNIT>")
--       4 event_stream              tenant event stream
-- ARGV: 1 tenant_id                 tenant id
--       2 scope_path                canonical scope path
--       3 unit                      unit (USD_MICROCENTS|TOKENS|CREDITS|RISK_POINTS)
--       4 allocated                 allocated (decimal int64 >= 0)
--       5 overdraft_limit           overdraft limit (decimal int64 >= 0)
--       6 commit_overage_policy     commit overage policy ('' = none)
--       7 caps                      caps (JSON, '' = none)
--       8 metadata                  metadata (JSON object of strings)
--       9 event_ctx                 event context (internal/eventctx.Arg)
-- Result: ok(<budget hash after the write>)
-- JSON admin/create_budget: {*}
-- Refusals: TENANT_NOT_FOUND, TENANT_CLOSED, TENANT_SUSPENDED, DUPLICATE_RESOURCE,
--   INVALID_REQUEST, INTERNAL_ERROR (malformed tenant status).
-- remaining = allocated; reserved = spent = debt = 0; is_over_limit false; ACTIVE
-- (one packed `bal` field, lib/core.lua BAL).
-- Events: budget.created (EventDataBudgetLifecycle, operation CREATE).

local tenant, scope, unit = ARGV[1], ARGV[2], ARGV[3]
local st = redis.call('HGET', KEYS[1], 'status')
if not st then
  return fail('TENANT_NOT_FOUND', 'tenant ' .. tenant .. ' not found', {tenant_id = tenant})
end
if st == 'CLOSED' then
  return fail('TENANT_CLOSED', 'tenant ' .. tenant .. ' is closed', {tenant_id = tenant})
end
if st == 'SUSPENDED' then
  return fail('TENANT_SUSPENDED', 'tenant ' .. tenant .. ' is suspended', {tenant_id = tenant})
end
if st ~= 'ACTIVE' then
  return fail('INTERNAL_ERROR', 'tenant record has a malformed status', {tenant_id = tenant})
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  return fail('DUPLICATE_RESOURCE', 'budget ' .. scope .. ' ' .. unit .. ' already exists',
    {scope = scope, unit = unit})
end
local allocated, bad = amount_arg(ARGV[4], 'allocated')
if bad then return bad end
local limit, bad_limit = amount_arg(ARGV[5], 'overdraft_limit')
if bad_limit then return bad_limit end

local now = now_ms()
local ts = string.format('%.0f', now)
local fields = {
  'scope_path', scope, 'unit', unit, 'bal', BAL.pack('ACTIVE', allocated, '0', '0', allocated, '0', limit, false),
  'created_at', ts, 'updated_at', ts,
  'metadata', ARGV[8],
}
if ARGV[6] ~= '' then
  fields[#fields + 1] = 'commit_overage_policy'
  fields[#fields + 1] = ARGV[6]
end
if ARGV[7] ~= '' then
  fields[#fields + 1] = 'caps'
  fields[#fields + 1] = ARGV[7]
end
redis.call('HSET', KEYS[2], unpack(fields))
redis.call('ZADD', KEYS[3], 0, scope .. '|' .. unit)

local emit = event_emitter(KEYS[4], ARGV[9], now)
emit('budget.created', 'budget', scope, {
  ledger_id = scope .. '|' .. unit, scope = scope, unit = unit, operation = 'CREATE',
  new_state = {allocated = allocated, remaining = allocated, debt = '0', spent = '0',
    reserved = '0', status = 'ACTIVE'},
})
audit_ok_ev(KEYS[4], ARGV[9])
return ok(hgetall(KEYS[2]))
