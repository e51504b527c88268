-- lib/refund.lua: returning a held amount to budgets (reserved -= amount,
-- remaining += amount), the one implementation behind release (ledger),
-- expiry (sweeper) and the operator's quarantine resolution (ops). Each
-- caller states its guards; every step is computed with int64.lua before the
-- caller writes any, so a refund is applied whole or not at all.
-- Included with "-- include: lib/refund.lua" (see internal/script).

-- refund_read reads the balance of budget key (core.lua BAL), tolerating
-- whatever the key holds: {key, status, rem, res, spent, alloc, debt, lim,
-- over} (canonical int64 strings, as load_budget gives them), or nil and
-- 'WRONG_TYPE' (not a hash), 'MISSING' (no such key) or 'MALFORMED' (no
-- balance field, or a corrupt one).
local function refund_read(key)
  local v = redis.pcall('HGET', key, 'bal')
  if type(v) == 'table' and v.err then return nil, 'WRONG_TYPE' end
  if not v and redis.call('EXISTS', key) == 0 then return nil, 'MISSING' end
  local st, rem, res, spent, alloc, debt, lim, over = BAL.split(v)
  if not st then return nil, 'MALFORMED' end
  return {key = key, status = st, rem = rem, res = res, spent = spent, alloc = alloc, debt = debt, lim = lim,
    over = over}
end

-- refund_step computes returning amount to budget b ({key, res, rem}, as
-- refund_read or lib/ledger_budget.lua load_budget give it) and keeps the
-- result in b (b.new_res, b.new_rem; nothing is allocated): true, or nil and
-- 'RESERVED_UNDERFLOW' (reserved < amount, refused only when no_underflow:
-- a budget cannot hold less than what was reserved against it, and refunding
-- anyway would credit money twice) or 'AMOUNT_OVERFLOW'.
local function refund_step(b, amount, no_underflow)
  if no_underflow and i64_cmp(b.res, amount) < 0 then return nil, 'RESERVED_UNDERFLOW' end
  local res, rem = i64_sub(b.res, amount), i64_add(b.rem, amount)
  if res == nil or rem == nil then return nil, 'AMOUNT_OVERFLOW' end
  b.new_res, b.new_rem = res, rem
  return true
end

-- refund_apply writes the refunds refund_step computed for budgets bs (one
-- HSET of each budget's packed balance).
local function refund_apply(bs)
  for _, b in ipairs(bs) do
    redis.call('HSET', b.key, 'bal', BAL.pack(b.status, b.new_rem, b.new_res, b.spent, b.alloc, b.debt, b.lim, b.over))
  end
end

-- quota_refund gives back the v0.1.26 per_run quota counts a reservation
-- holds (its `qrun` field: the counter keys as a JSON array, lib/quota.lua)
-- on release and expiry (the action-kinds spec's per_run lifecycle; calendar
-- windows are never given back): each counter still above 0 goes down by
-- one; one reset or expired since stays as it is.
local function quota_refund(qrun)
  if qrun == nil or qrun == false or qrun == '' then return end
  local good, ks = pcall(cjson.decode, qrun)
  if not good or type(ks) ~= 'table' then return end
  for _, k in ipairs(ks) do
    local n = tonumber(redis.call('HGET', k, 'n') or '')
    if n and n > 0 then redis.call('HSET', k, 'n', n - 1) end
  end
end
