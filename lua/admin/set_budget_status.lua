-- admin/set_budget_status: the budget status machine.
--   FROZEN  (freeze):   ACTIVE -> FROZEN. A frozen budget refuses new
--                       reservations, events and funding; settlement of
--                       existing holds proceeds.
--   ACTIVE  (unfreeze): FROZEN -> ACTIVE.
--   CLOSED  (close):    ACTIVE|FROZEN -> CLOSED, terminal. The ledger is left
--                       as it is: held reservations settle normally (docs/protocol.md#commit).
--
-- include: lib/audit.lua lib/admin_record.lua
-- Audit: on success, the call's audit entry in the same run (lib/audit.lua).
-- KEYS: 1 tenant_record     tenant record hash
--       2 budget            budget hash
--       3 event_stream      tenant event stream
-- ARGV: 1 scope_path        canonical scope path
--       2 unit              unit
--       3 reason            reason (event data only)
--       4 event_ctx         event context (internal/eventctx.Arg)
--       5 status            target status: FROZEN | ACTIVE | CLOSED
-- Result: ok(<budget hash after>)
-- JSON admin/set_budget_status: {*}
-- Refusals: TENANT_CLOSED, BUDGET_NOT_FOUND; freeze: BUDGET_FROZEN (already
--   frozen), BUDGET_CLOSED; unfreeze: INVALID_STATE (not FROZEN; details.status
--   says which); close: BUDGET_CLOSED (already closed); INTERNAL_ERROR
--   (a corrupt balance, or an unknown target).
-- Events: budget.frozen | budget.unfrozen | budget.closed
--   (EventDataBudgetLifecycle, operation STATUS_CHANGE).

local scope, unit, target = ARGV[1], ARGV[2], ARGV[5]
local details = {scope = scope, unit = unit}
local event_of = {FROZEN = 'budget.frozen', ACTIVE = 'budget.unfrozen', CLOSED = 'budget.closed'}
if not event_of[target] then return fail('INTERNAL_ERROR', 'unknown target status', details) end
local b, v = open_budget(KEYS[1], KEYS[2], scope, unit, details)
if not b then return v end
local status = v.status

if target == 'FROZEN' then
  if status == 'FROZEN' then return fail('BUDGET_FROZEN', 'budget is already frozen', details) end
  if status == 'CLOSED' then return fail('BUDGET_CLOSED', 'budget is closed', details) end
elseif target == 'ACTIVE' then
  if status ~= 'FROZEN' then
    return fail('INVALID_STATE', 'only a FROZEN budget can be unfrozen (it is ' .. status .. ')',
      {scope = scope, unit = unit, status = status})
  end
elseif status == 'CLOSED' then
  return fail('BUDGET_CLOSED', 'budget is already closed', details)
end

local now = now_ms()
redis.call('HSET', KEYS[2], 'bal', BAL.pack(target, v.remaining, v.reserved, v.spent, v.allocated, v.debt,
  v.overdraft_limit, v.over), 'updated_at', string.format('%.0f', now))
local function state(s)
  return {allocated = v.allocated, remaining = v.remaining, debt = v.debt,
    spent = v.spent, reserved = v.reserved, status = s}
end
local emit = event_emitter(KEYS[3], ARGV[4], now)
emit(event_of[target], 'budget', scope, {ledger_id = scope .. '|' .. unit, scope = scope,
  unit = unit, operation = 'STATUS_CHANGE', previous_state = state(status),
  new_state = state(target), reason = ARGV[3]})
audit_ok_ev(KEYS[3], ARGV[4])
return ok(hgetall(KEYS[2]))
