-- lib/ledger_budget.lua: reading budget hashes and building balance snapshots.
-- Included by ledger scripts with "-- include: lib/ledger_budget.lua" (see internal/script).

-- canon returns the canonical int64 string of an amount, or nil. Amounts
-- from int64.lua are canonical already, so one pattern match settles the
-- common case; anything else (leading zeros, 16+ digits, garbage) goes
-- through i64_norm, which decides exactly.
local function canon(v)
  if v == '0' or (#v < 16 and string.find(v, '^%-?[1-9]%d*$')) then return v end
  return i64_norm(v)
end

-- load_budget reads one budget's balance (core.lua BAL: one field, one
-- pattern match) into canonical int64 strings. Returns nil when the key holds
-- no balance (no budget), or nil and a message when it is corrupt (callers
-- fail closed with INTERNAL_ERROR before any write). no_caps: the settling
-- scripts, which never read a budget's caps, read the balance alone (HGET);
-- otherwise one HMGET reads the caps with it. The table is built by one
-- constructor (sized once; growing a table key by key rehashes it at every
-- power of two).
local function load_budget(key, path, no_caps)
  local v, caps
  if no_caps then
    v = redis.call('HGET', key, 'bal')
  else
    local r = redis.call('HMGET', key, 'bal', 'caps')
    v, caps = r[1], r[2]
    if not v and caps then return nil, 'budget ' .. path .. ' holds caps but no balance' end
  end
  if not v then return nil end
  local status, rem, res, spent, alloc, debt, lim, over = BAL.split(v)
  if not status then return nil, 'budget ' .. path .. ' holds a malformed balance' end
  local b = {key = key, path = path, rem = rem, res = res, spent = spent, alloc = alloc, debt = debt, lim = lim,
    over = over, status = status}
  -- Only when set: a nil in the constructor would still take a slot, and the
  -- callers' own keys (pos, rem_n, exhausted) would then outgrow the table.
  if caps and caps ~= '' then b.caps = caps end
  return b
end

-- write_budget stores b's balance with the amounts this script computed
-- (nil = unchanged): one HSET of the packed field.
local function write_budget(b, rem, res, spent, debt, over)
  if over == nil then over = b.over end
  redis.call('HSET', b.key, 'bal', BAL.pack(b.status, rem or b.rem, res or b.res, spent or b.spent, b.alloc,
    debt or b.debt, b.lim, over))
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
