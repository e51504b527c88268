-- lib/ledger_budget.lua: reading budget hashes and building balance snapshots.
-- Included by ledger scripts with "-- include: lib/ledger_budget.lua" (see pkg/script).

local BUDGET_STATUSES = {ACTIVE = true, FROZEN = true, CLOSED = true}
local BUDGET_READ = {'remaining', 'reserved', 'spent', 'allocated', 'debt', 'overdraft_limit', 'is_over_limit', 'status', 'caps'}
local BUDGET_AMOUNTS = {'rem', 'res', 'spent', 'alloc', 'debt', 'lim'}

-- load_budget reads one budget hash into canonical int64 strings. Returns nil
-- when the key holds no budget, or nil and a message when it is corrupt
-- (callers fail closed with INTERNAL_ERROR before any write).
local function load_budget(key, path)
  local v = redis.call('HMGET', key, unpack(BUDGET_READ))
  local any = false
  for i = 1, #BUDGET_READ do
    if v[i] then any = true end
  end
  if not any then return nil end
  local b = {key = key, path = path}
  for i = 1, #BUDGET_AMOUNTS do
    local n = i64_norm(v[i] or '0')
    if n == nil then return nil, 'budget ' .. path .. ' holds a malformed ' .. BUDGET_READ[i] end
    b[BUDGET_AMOUNTS[i]] = n
  end
  b.over = (v[7] == 'true')
  b.status = v[8] or 'ACTIVE'
  if b.status == '' then b.status = 'ACTIVE' end
  if not BUDGET_STATUSES[b.status] then return nil, 'budget ' .. path .. ' has an invalid status' end
  if v[9] and v[9] ~= '' then b.caps = v[9] end
  return b
end

-- snapshots reads the post-mutation balance of every budget in bs.
local function snapshots(bs)
  local out = {}
  for i, b in ipairs(bs) do out[i] = balance_of(b.key, b.path) end
  return out
end
