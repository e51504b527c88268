-- lib/ledger_settle.lua: the commit/event overage arithmetic (REJECT, ALLOW_IF_AVAILABLE, ALLOW_WITH_OVERDRAFT).
-- Included by ledger scripts with "-- include: lib/ledger_settle.lua" (see internal/script).

-- settle plans charging actual A against budgets bs that hold estimate E
-- (E = 0 for a direct-debit event), exactly as docs/protocol.md#commit:
--   A <= E: reserved -= E, remaining += E - A, spent += A (any policy).
--   A > E, REJECT: BUDGET_EXCEEDED.
--   A > E, ALLOW_IF_AVAILABLE: cap = min(delta, min max(rem, 0)); never debt;
--     scopes whose own remaining < delta are flagged over limit when capped.
--   A > E, ALLOW_WITH_OVERDRAFT: zero-limit scopes cap as above; scopes with a
--     limit take the unfunded part as debt, refused (whole commit) when debt
--     would exceed the limit.
-- Every new value is computed with int64.lua first; any overflow refuses the
-- whole operation before the first write. Returns a plan
-- {charged, debt_total, delta, rows = {{b, rem, res, spent, debt, over, deficit}}}
-- or nil, code, message, details.
local function settle(bs, E, A, policy)
  local delta = i64_sub(A, E)
  -- {nil, nil, nil}: the array part sized for three scopes at once (filled
  -- from 1, an empty table rehashes at 1, 2 and 4 entries).
  local rows = {nil, nil, nil}
  local charged, cap
  if delta == '0' or string.byte(delta, 1) == 45 then -- delta <= 0 (canonical: no conversion)
    local back = i64_sub(E, A)
    -- Fast path (0 <= A <= E < 10^15, budget amounts below 10^15 in
    -- magnitude): every sum is exact in a double and stays inside int64, so
    -- each amount is converted once and formatted as i64_add would.
    local nb, nE, nA = (#E < 16) and (back + 0), (#E < 16) and (E + 0), (#E < 16) and (A + 0)
    for i = 1, #bs do
      local b = bs[i]
      if nE and #b.rem < 16 and #b.res < 16 and #b.spent < 16 then
        local rem, res, spent = b.rem + nb, b.res - nE, b.spent + nA
        rows[i] = {b = b, rem = (rem == 0) and '0' or string.format('%d', rem),
          res = (res == 0) and '0' or string.format('%d', res),
          spent = (spent == 0) and '0' or string.format('%d', spent), debt = b.debt, over = b.over, deficit = '0'}
      else
        rows[i] = {b = b, rem = i64_add(b.rem, back), res = i64_sub(b.res, E), spent = i64_add(b.spent, A),
          debt = b.debt, over = b.over, deficit = '0'}
      end
    end
    charged = A
  else
    if policy == 'REJECT' then
      return nil, 'BUDGET_EXCEEDED', 'actual exceeds the estimate and the overage policy is REJECT',
        {requested = A, reserved = E}
    end
    cap = delta
    for _, b in ipairs(bs) do
      if (policy == 'ALLOW_IF_AVAILABLE' or b.lim == '0') and i64_cmp(b.rem, delta) < 0 then
        cap = i64_min(cap, i64_pos(b.rem))
      end
    end
    if policy == 'ALLOW_WITH_OVERDRAFT' then
      for _, b in ipairs(bs) do
        if b.lim ~= '0' and i64_cmp(b.rem, cap) < 0 then
          local deficit = i64_sub(cap, i64_pos(b.rem))
          local nd = i64_add(b.debt, deficit)
          if nd == nil or i64_cmp(nd, b.lim) > 0 then
            return nil, 'OVERDRAFT_LIMIT_EXCEEDED', 'the unfunded part would push debt above the overdraft limit at ' .. b.path,
              {scope = b.path, debt = b.debt, overdraft_limit = b.lim, requested = deficit, remaining = b.rem}
          end
        end
      end
    end
    for i, b in ipairs(bs) do
      local row = {b = b, rem = i64_sub(b.rem, cap), res = i64_sub(b.res, E), debt = b.debt, over = b.over, deficit = '0'}
      local funded = cap
      if i64_cmp(b.rem, cap) < 0 then
        funded = i64_pos(b.rem)
        row.deficit = i64_sub(cap, funded)
        row.debt = i64_add(b.debt, row.deficit)
      end
      row.spent = i64_add(b.spent, funded)
      if row.spent then row.spent = i64_add(row.spent, E) end
      if row.debt and b.lim ~= '0' and i64_cmp(row.debt, b.lim) > 0 then row.over = true end
      if i64_cmp(cap, delta) < 0 and i64_cmp(b.rem, delta) < 0 and (policy == 'ALLOW_IF_AVAILABLE' or b.lim == '0') then
        row.over = true
      end
      rows[i] = row
    end
    charged = i64_add(E, cap)
  end
  local debt_total = '0'
  for i = 1, #rows do
    local row = rows[i]
    if row.rem == nil or row.res == nil or row.spent == nil or row.debt == nil then
      return nil, 'AMOUNT_OVERFLOW', 'the charge would overflow int64 at ' .. row.b.path, {scope = row.b.path}
    end
    if row.deficit ~= '0' then debt_total = i64_add_sat(debt_total, row.deficit) end
  end
  return {charged = charged, debt_total = debt_total, delta = delta, rows = rows}
end

-- apply_plan writes a settlement plan (canonical strings; one HSET of each
-- budget's packed balance, lib/ledger_budget.lua write_budget).
local function apply_plan(plan)
  local rows = plan.rows
  for i = 1, #rows do
    local row = rows[i]
    local b = row.b
    write_budget(b, row.rem, row.res, row.spent, row.debt, row.over)
  end
end

-- emit_transitions emits the per-scope budget events of a settlement:
-- exhausted (remaining > 0 -> exactly 0), over_limit_entered (false -> true),
-- debt_incurred (new debt in this scope). rid is nil for direct debits.
local function emit_transitions(emit, unit, plan, rid, policy)
  local rows = plan.rows
  for i = 1, #rows do
    local row = rows[i]
    local b = row.b
    if row.rem == '0' and i64_cmp(b.rem, '0') > 0 then
      emit('budget.exhausted', 'budget', b.path, {
        scope = b.path, unit = unit, threshold = 1, direction = 'rising', remaining = '0',
        allocated = b.alloc, spent = row.spent, reserved = row.res,
      })
    end
    if row.over and not b.over then
      emit('budget.over_limit_entered', 'budget', b.path, {
        scope = b.path, unit = unit, debt = row.debt, overdraft_limit = b.lim, is_over_limit = true,
      })
    end
    if row.deficit ~= '0' then
      emit('budget.debt_incurred', 'budget', b.path, {
        scope = b.path, unit = unit, reservation_id = rid, debt_incurred = row.deficit,
        total_debt = row.debt, overdraft_limit = b.lim, overage_policy = policy,
      })
    end
  end
end
