-- lib/ledger_check.lua: the reserve-time budget checks in protocol order (frozen, closed, over-limit, debt, remaining).
-- Included by ledger scripts with "-- include: lib/ledger_check.lua" (see internal/script).
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
--
-- En is tonumber(E) when E has fewer than 16 characters (else nil): the
-- comparison then stays in Lua numbers (each string<->number conversion
-- costs Redis ~2-3k instructions), and b.rem_n keeps the budget's remaining
-- as a number for the caller's arithmetic. Amounts are canonical (load_budget),
-- so debt > 0 is "not '0' and not negative".
local function check_scope(b, E, En)
  if b.status == 'FROZEN' then return 'BUDGET_FROZEN' end
  if b.status == 'CLOSED' then return 'BUDGET_CLOSED' end
  if b.over then return 'OVERDRAFT_LIMIT_EXCEEDED' end
  if b.debt ~= '0' and string.byte(b.debt, 1) ~= 45 and b.lim == '0' then return 'DEBT_OUTSTANDING' end
  if En and #b.rem < 16 then
    b.rem_n = b.rem + 0 -- canonical (load_budget): one conversion, not tonumber()'s two
    if b.rem_n < En then return 'BUDGET_EXCEEDED' end
  elseif i64_cmp(b.rem, E) < 0 then
    return 'BUDGET_EXCEEDED'
  end
  return nil
end

-- load_scopes reads the budget of every affected scope (keys from KEYS[first]);
-- returns the budgeted ones in canonical order (b.pos: the position in
-- scopes), or nil and a message. Only the last scope's caps are ever used
-- (a budget's caps apply at the deepest derived scope), so only its HMGET
-- reads them.
local function load_scopes(first, scopes)
  local bs, n = {nil, nil, nil}, #scopes -- presized for three scopes (no rehash while filled)
  for i = 1, n do
    local b, err = load_budget(KEYS[first + i - 1], scopes[i], i < n)
    if err then return nil, err end
    if b then b.pos = i; bs[#bs + 1] = b end
  end
  return bs
end

-- unit_mismatch is the UNIT_MISMATCH refusal for a request in unit that
-- found no budget, when the first derived scope (canonical order) that has
-- budgets has them only in other units (lex index "<scope_path>|<UNIT>");
-- nil when no scope has a budget at all.
local function unit_mismatch(budgets_key, scopes, unit)
  for i = 1, #scopes do
    local m = redis.call('ZRANGEBYLEX', budgets_key, '[' .. scopes[i] .. '|', '(' .. scopes[i] .. '}', 'LIMIT', 0, 8)
    if #m > 0 then
      local units = {}
      for j = 1, #m do units[j] = string.sub(m[j], #scopes[i] + 2) end
      units = table.concat(units, ',')
      return fail('UNIT_MISMATCH', 'no budget in ' .. unit .. '; ' .. scopes[i] .. ' is budgeted in ' .. units,
        {scope = scopes[i], requested_unit = unit, expected_units = units})
    end
  end
  return nil
end

-- budget_deny is the v0.1.26 DenyDetail of a budget refusal at budget b
-- (docs/protocol.md#v0126-action-governance): the blocking scope, its
-- remaining (a decimal string: exact; the transports write it as an
-- integer) and what would lift the refusal.
local function budget_deny(code, b, E, unit)
  local fix
  if code == 'BUDGET_EXCEEDED' then
    fix = 'Fund ' .. b.path .. ' by at least ' .. (i64_sub(E, b.rem) or E) .. ' ' .. unit
  elseif code == 'BUDGET_FROZEN' then
    fix = 'Unfreeze the ' .. unit .. ' budget of ' .. b.path
  elseif code == 'BUDGET_CLOSED' then
    fix = 'The ' .. unit .. ' budget of ' .. b.path .. ' is closed; reserve under another scope'
  else
    fix = 'Repay the debt of ' .. b.debt .. ' ' .. unit .. ' at ' .. b.path .. ' before new reservations'
  end
  return {reason_code = code, blocked_by_scope = b.path, budget_remaining = b.rem, suggested_fix = fix}
end

-- scope_deny is the DenyDetail of a refusal that names only a scope
-- (tenant status, no budget).
local function scope_deny(code, scope, fix)
  return {reason_code = code, blocked_by_scope = scope, suggested_fix = fix}
end
