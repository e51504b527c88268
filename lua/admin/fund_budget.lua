-- admin/fund_budget: apply one funding operation to a budget, exactly and
-- idempotently (docs/protocol.md#budgets-and-funding-admin).
-- include: lib/ledger_util.lua lib/idem.lua lib/audit.lua lib/admin_record.lua
--
-- Audit: on success, the call's audit entry in the same run (lib/audit.lua).
-- KEYS: 1 tenant_record        tenant record hash
--       2 budget               budget hash
--       3 idem_record          idempotency record (cy:{t:T}:idem:fund:<idempotency_key>)
--       4 event_stream         tenant event stream
-- ARGV: 1 operation            operation: CREDIT|DEBIT|RESET|RESET_SPENT|REPAY_DEBT
--       2 amount               amount (decimal int64 >= 0)
--       3 spent                spent override for RESET_SPENT (decimal int64 >= 0; '' = not given -> 0)
--       4 reason               reason (event data only)
--       5 payload_hash         payload hash (internal/idempotency.PayloadHash of the canonical request)
--       6 idem_lifetime_ms     idempotency record lifetime in ms
--       7 scope_path           canonical scope path
--       8 unit                 unit
--       9 event_ctx            event context (internal/eventctx.Arg)
-- JSON admin/fund_budget: replay resp{operation timestamp_ms
--   previous{allocated remaining debt spent reserved} new{allocated remaining debt spent reserved} budget}
-- Result: {"replay":bool,"resp":R}: the operation, its time, the balances before
-- and after and the budget hash after (amounts as decimal strings).
--   R is stored, as bytes, in KEYS[3] for 24 h; a same-key same-payload replay
--   returns exactly those bytes (no write, no event).
-- Refusals, all before the first write: IDEMPOTENCY_MISMATCH, TENANT_CLOSED,
--   BUDGET_NOT_FOUND, BUDGET_FROZEN, BUDGET_CLOSED, BUDGET_EXCEEDED (DEBIT >
--   remaining), AMOUNT_OVERFLOW (any result outside int64), INVALID_REQUEST,
--   INTERNAL_ERROR (malformed stored values).
-- Arithmetic (int64.lua, never tonumber on amounts):
--   CREDIT      allocated += a; remaining += a
--   DEBIT       allocated -= a; remaining -= a            (refused if remaining < a)
--   RESET       allocated = a; remaining = a - reserved - spent - debt
--   RESET_SPENT allocated = a; spent = s (or 0); remaining = a - spent - reserved - debt
--   REPAY_DEBT  r = min(debt, a); debt -= r; excess = a - r;
--               allocated += excess; remaining += r + excess
--   then is_over_limit = debt > overdraft_limit.
-- Events: budget.funded|debited|reset|reset_spent|debt_repaid
--   (EventDataBudgetLifecycle), plus budget.over_limit_entered/exited when the
--   flag flips.

local op, scope, unit = ARGV[1], ARGV[7], ARGV[8]
local details = {scope = scope, unit = unit}

-- Idempotency precedes every state check (a replay of a success stays a
-- success even if the budget was frozen or the tenant closed since).
local rec, refusal = idem_check(KEYS[3], ARGV[5], 'idempotency key already used with a different request', details)
if refusal then return refusal end
if rec then
  if not rec.resp then return fail('INTERNAL_ERROR', 'idempotency record is malformed', details) end
  return {'OK', '{"replay":true,"resp":' .. rec.resp .. '}'}
end

local b, v = open_budget(KEYS[1], KEYS[2], scope, unit, details)
if not b then return v end
local status = v.status
if status == 'FROZEN' then
  return fail('BUDGET_FROZEN', 'budget is frozen', details)
elseif status == 'CLOSED' then
  return fail('BUDGET_CLOSED', 'budget is closed', details)
end

local amt, bad = amount_arg(ARGV[2], 'amount')
if bad then return bad end
local ttl = tonumber(ARGV[6])
if ttl == nil or ttl < 1 or ttl ~= math.floor(ttl) then
  return fail('INVALID_REQUEST', 'idempotency lifetime must be a positive integer', {field = 'ttl'})
end
local cur = v -- canonical int64 strings (open_budget)

local function overflow(field)
  return fail('AMOUNT_OVERFLOW', op .. ' would take ' .. field .. ' outside int64',
    {scope = scope, unit = unit, field = field})
end

local nxt = {allocated = cur.allocated, remaining = cur.remaining, spent = cur.spent, debt = cur.debt}
local spent_override = false
local ev_type
if op == 'CREDIT' then
  ev_type = 'budget.funded'
  nxt.allocated = i64_add(cur.allocated, amt)
  if not nxt.allocated then return overflow('allocated') end
  nxt.remaining = i64_add(cur.remaining, amt)
  if not nxt.remaining then return overflow('remaining') end
elseif op == 'DEBIT' then
  ev_type = 'budget.debited'
  if i64_cmp(cur.remaining, amt) < 0 then
    return fail('BUDGET_EXCEEDED', 'remaining is less than the debit',
      {scope = scope, unit = unit, remaining = cur.remaining, requested = amt})
  end
  nxt.allocated = i64_sub(cur.allocated, amt)
  if not nxt.allocated then return overflow('allocated') end
  nxt.remaining = i64_sub(cur.remaining, amt)
  if not nxt.remaining then return overflow('remaining') end
elseif op == 'RESET' or op == 'RESET_SPENT' then
  ev_type = (op == 'RESET') and 'budget.reset' or 'budget.reset_spent'
  nxt.allocated = amt
  if op == 'RESET_SPENT' then
    nxt.spent = '0'
    if ARGV[3] ~= '' then
      local s, bad_spent = amount_arg(ARGV[3], 'spent')
      if bad_spent then return bad_spent end
      nxt.spent = s
      spent_override = true
    end
  end
  -- reserved, spent and debt are >= 0, so the partial results only fall:
  -- an intermediate overflow means the final result overflows too.
  local r = i64_sub(amt, nxt.spent)
  if r then r = i64_sub(r, cur.reserved) end
  if r then r = i64_sub(r, cur.debt) end
  if not r then return overflow('remaining') end
  nxt.remaining = r
elseif op == 'REPAY_DEBT' then
  ev_type = 'budget.debt_repaid'
  local repaid = i64_min(i64_pos(cur.debt), amt)
  nxt.debt = i64_sub(cur.debt, repaid)
  if not nxt.debt then return overflow('debt') end
  local excess = i64_sub(amt, repaid)
  if not excess then return overflow('allocated') end
  nxt.allocated = i64_add(cur.allocated, excess)
  if not nxt.allocated then return overflow('allocated') end
  nxt.remaining = i64_add(cur.remaining, amt)
  if not nxt.remaining then return overflow('remaining') end
else
  return fail('INVALID_REQUEST', 'unknown funding operation', {field = 'operation'})
end

local was_over = v.over
local is_over = i64_cmp(nxt.debt, cur.overdraft_limit) > 0

-- All checks passed: write.
local now = now_ms()
local ts = string.format('%.0f', now)
redis.call('HSET', KEYS[2], 'bal', BAL.pack(status, nxt.remaining, cur.reserved, nxt.spent, nxt.allocated,
  nxt.debt, cur.overdraft_limit, is_over), 'updated_at', ts)

local prev_state = {allocated = cur.allocated, remaining = cur.remaining, debt = cur.debt,
  spent = cur.spent, reserved = cur.reserved}
local new_state = {allocated = nxt.allocated, remaining = nxt.remaining, debt = nxt.debt,
  spent = nxt.spent, reserved = cur.reserved}
local resp = cjson.encode({operation = op, timestamp_ms = ts, previous = prev_state,
  new = new_state, budget = hgetall(KEYS[2])})
idem_put(KEYS[3], ARGV[5], ttl, resp)

local emit = event_emitter(KEYS[4], ARGV[9], now)
prev_state.status = status
new_state.status = status
emit(ev_type, 'budget', scope, {ledger_id = scope .. '|' .. unit, scope = scope, unit = unit,
  operation = op, previous_state = prev_state, new_state = new_state,
  spent_override_provided = spent_override, reason = ARGV[4]})
if was_over ~= is_over then
  emit(is_over and 'budget.over_limit_entered' or 'budget.over_limit_exited', 'budget', scope,
    {scope = scope, unit = unit, debt = nxt.debt, overdraft_limit = cur.overdraft_limit,
      is_over_limit = is_over})
end
audit_ok_ev(KEYS[4], ARGV[9])
return {'OK', '{"replay":false,"resp":' .. resp .. '}'}
