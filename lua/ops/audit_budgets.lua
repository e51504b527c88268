#!lua flags=no-writes
-- ops/audit_budgets: read one page of a tenant's budgets for the audit (read-only).
-- include: lib/keys.lua
--
-- KEYS: 1 tenant_prefix   "cy:{t:<tenant>}:"; the budgets index (prefix ..
--                         "budgets", members "<scope_path>|<UNIT>") and the budget
--                         hashes (prefix .. "b:<scope_path>:<UNIT>") are derived from it
-- ARGV: 1 after           cursor: last member seen ('' = start)
--       2 page_size       1..1000
-- Result ok(): per budget member m, whether its key exists, whether it is not a
-- hash (wrong_type), f = {allocated, remaining, reserved, spent, debt} as
-- stored in the packed balance (lib/core.lua BAL; all absent when it is
-- missing or not eight parts) and bad when the balance does not pass the
-- ledger's own strict reading (status, flag, canonical amounts); done when
-- the page is the last. The
-- caller checks the values (internal/ledgerops), so the arithmetic lives in
-- one place.
-- JSON ops/audit_budgets: rows[]{m exists wrong_type f bad} done

local prefix = KEYS[1]
local n = tonumber(ARGV[2])
if not n or n < 1 or n > 1000 then return fail('INVALID_REQUEST', 'page size must be 1..1000') end
local min = '-'
if ARGV[1] ~= '' then min = '(' .. ARGV[1] end
local members = redis.call('ZRANGEBYLEX', key_index(prefix, 'budgets'), min, '+', 'LIMIT', 0, n)
local rows = {}
for _, m in ipairs(members) do
  local bar = string.find(m, '|[^|]*$')
  local r = {m = m, exists = false, f = {}}
  if bar then
    local key = key_budget(prefix, string.sub(m, 1, bar - 1), string.sub(m, bar + 1))
    local v = redis.pcall('HGET', key, 'bal')
    if type(v) == 'table' and v.err then
      r.exists = true
      r.wrong_type = true
    else
      r.exists = redis.call('EXISTS', key) == 1
      r.f = BAL.amounts(v) or {}
      if r.exists and not BAL.split(v) then r.bad = true end
    end
  end
  rows[#rows + 1] = r
end
return ok({rows = rows, done = #members < n})
