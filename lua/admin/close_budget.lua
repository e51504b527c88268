-- admin/close_budget: ACTIVE|FROZEN -> CLOSED (terminal). The ledger is left as
-- it is: reservations already held settle normally (PROTOCOL Part 1 §8).
--
-- KEYS[1] = tenant record hash
-- KEYS[2] = budget hash
-- KEYS[3] = tenant event stream
-- ARGV[1] = canonical scope path
-- ARGV[2] = unit
-- ARGV[3] = reason (event data only)
-- ARGV[4] = event context (pkg/events.Context)
-- Result: ok(<budget hash after>)
-- Refusals: TENANT_CLOSED, BUDGET_NOT_FOUND, BUDGET_CLOSED (already closed),
--   INTERNAL_ERROR (malformed status).
-- Events: budget.closed (EventDataBudgetLifecycle, operation STATUS_CHANGE).

local scope, unit = ARGV[1], ARGV[2]
local details = {scope = scope, unit = unit}
if redis.call('HGET', KEYS[1], 'status') == 'CLOSED' then
  return fail('TENANT_CLOSED', 'the tenant is closed', details)
end
local b = hgetall(KEYS[2])
if next(b) == nil then
  return fail('BUDGET_NOT_FOUND', 'budget ' .. scope .. ' ' .. unit .. ' not found', details)
end
local status = b.status or 'ACTIVE'
if status == 'CLOSED' then return fail('BUDGET_CLOSED', 'budget is already closed', details) end
if status ~= 'ACTIVE' and status ~= 'FROZEN' then
  return fail('INTERNAL_ERROR', 'budget has a malformed status', details)
end

local now = now_ms()
redis.call('HSET', KEYS[2], 'status', 'CLOSED', 'updated_at', string.format('%.0f', now))
local function state(s)
  return {allocated = b.allocated or '0', remaining = b.remaining or '0', debt = b.debt or '0',
    spent = b.spent or '0', reserved = b.reserved or '0', status = s}
end
local emit = event_emitter(KEYS[3], ARGV[4], now)
emit('budget.closed', 'budget', scope, {ledger_id = scope .. '|' .. unit, scope = scope,
  unit = unit, operation = 'STATUS_CHANGE', previous_state = state(status),
  new_state = state('CLOSED'), reason = ARGV[3]})
return ok(hgetall(KEYS[2]))
