-- lib/ledger_check.lua: the reserve-time budget checks in protocol order (frozen, closed, over-limit, debt, remaining).
-- Included by ledger scripts with "-- include: lib/ledger_check.lua" (see pkg/script).
-- include: lib/ledger_budget.lua

local CHECK_MSG = {
  BUDGET_FROZEN = 'budget is frozen',
  BUDGET_CLOSED = 'budget is closed',
  OVERDRAFT_LIMIT_EXCEEDED = 'budget is over its overdraft limit',
  DEBT_OUTSTANDING = 'budget has outstanding debt and no overdraft limit',
  BUDGET_EXCEEDED = 'insufficient remaining budget',
}

-- check_scope applies the reserve-time rules to one budget in the protocol's
-- order (frozen, closed, over limit, debt outstanding, remaining); first wins.
local function check_scope(b, E)
  if b.status == 'FROZEN' then return 'BUDGET_FROZEN' end
  if b.status == 'CLOSED' then return 'BUDGET_CLOSED' end
  if b.over then return 'OVERDRAFT_LIMIT_EXCEEDED' end
  if i64_cmp(b.debt, '0') > 0 and b.lim == '0' then return 'DEBT_OUTSTANDING' end
  if i64_cmp(b.rem, E) < 0 then return 'BUDGET_EXCEEDED' end
  return nil
end

-- load_scopes reads the budget of every affected scope (keys from KEYS[first]);
-- returns the budgeted ones in canonical order, or nil and a message.
local function load_scopes(first, scopes)
  local bs = {}
  for i = 1, #scopes do
    local b, err = load_budget(KEYS[first + i - 1], scopes[i])
    if err then return nil, err end
    if b then bs[#bs + 1] = b end
  end
  return bs
end

-- other_units finds the first derived scope (canonical order) that has
-- budgets only in other units, via the lex index "<scope_path>|<UNIT>".
local function other_units(budgets_key, scopes)
  for i = 1, #scopes do
    local m = redis.call('ZRANGEBYLEX', budgets_key, '[' .. scopes[i] .. '|', '(' .. scopes[i] .. '}', 'LIMIT', 0, 8)
    if #m > 0 then
      local units = {}
      for j = 1, #m do units[j] = string.sub(m[j], #scopes[i] + 2) end
      return scopes[i], table.concat(units, ',')
    end
  end
  return nil
end
