-- lib/ledger_budget.lua: reading budget hashes and building balance snapshots.
-- Included by ledger scripts with "-- include: lib/ledger_budget.lua" (see internal/script).

local BUDGET_STATUSES = {ACTIVE = true, FROZEN = true, CLOSED = true}
local BUDGET_READ = {'remaining', 'reserved', 'spent', 'allocated', 'debt', 'overdraft_limit', 'is_over_limit', 'status', 'caps'}
local BUDGET_AMOUNTS = {'rem', 'res', 'spent', 'alloc', 'debt', 'lim'}

-- canon returns the canonical int64 string of a stored amount, or nil. Stored
-- amounts are canonical already (every writer uses int64.lua results), so one
-- pattern match settles the common case; anything else (leading zeros, 16+
-- digits, garbage) goes through i64_norm, which decides exactly as before.
local function canon(v)
  if v == '0' or (#v < 16 and string.find(v, '^%-?[1-9]%d*$')) then return v end
  return i64_norm(v)
end

-- load_budget reads one budget hash into canonical int64 strings. Returns nil
-- when the key holds no budget, or nil and a message when it is corrupt
-- (callers fail closed with INTERNAL_ERROR before any write). no_caps: the
-- settling scripts, which never read a budget's caps, leave the field out
-- of the HMGET (an absent field costs Redis a scan of the whole hash).
-- The table is built by one constructor (sized once; growing a table key by
-- key rehashes it at every power of two).
local function load_budget(key, path, no_caps)
  local v
  if no_caps then
    v = redis.call('HMGET', key, 'remaining', 'reserved', 'spent', 'allocated', 'debt', 'overdraft_limit',
      'is_over_limit', 'status')
  else
    v = redis.call('HMGET', key, 'remaining', 'reserved', 'spent', 'allocated', 'debt', 'overdraft_limit',
      'is_over_limit', 'status', 'caps')
  end
  if not (v[1] or v[2] or v[3] or v[4] or v[5] or v[6] or v[7] or v[8] or v[9]) then return nil end
  local status = v[8] or 'ACTIVE'
  if status == '' then status = 'ACTIVE' end
  local b = {key = key, path = path, rem = canon(v[1] or '0'), res = canon(v[2] or '0'), spent = canon(v[3] or '0'),
    alloc = canon(v[4] or '0'), debt = canon(v[5] or '0'), lim = canon(v[6] or '0'), over = (v[7] == 'true'),
    status = status}
  if not (b.rem and b.res and b.spent and b.alloc and b.debt and b.lim) then
    for i = 1, #BUDGET_AMOUNTS do
      if b[BUDGET_AMOUNTS[i]] == nil then return nil, 'budget ' .. path .. ' holds a malformed ' .. BUDGET_READ[i] end
    end
  end
  if not BUDGET_STATUSES[status] then return nil, 'budget ' .. path .. ' has an invalid status' end
  -- Only when set: a nil in the constructor would still take a slot, and the
  -- callers' own keys (pos, rem_n, exhausted) would then outgrow the table.
  if v[9] and v[9] ~= '' then b.caps = v[9] end
  return b
end

-- snapshots reads the post-mutation balance of every budget in bs.
local function snapshots(bs)
  local out = {}
  for i, b in ipairs(bs) do out[i] = balance_of(b.key, b.path) end
  return out
end

-- balance_now is balance_of (lua/lib/core.lua) built from values the script
-- already holds instead of a second HMGET: b as loaded, with the amounts this
-- script has just written (nil = unchanged). The hot paths (reserve, commit)
-- use it; the values are the canonical strings that were written.
local function balance_now(b, rem, res, spent, debt, over)
  if over == nil then over = b.over end
  return {
    scope_path = b.path,
    remaining = rem or b.rem, reserved = res or b.res, spent = spent or b.spent,
    allocated = b.alloc, debt = debt or b.debt, overdraft_limit = b.lim,
    is_over_limit = over,
  }
end
