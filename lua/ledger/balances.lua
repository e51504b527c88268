#!lua flags=no-writes
-- ledger/balances: one page of the caller's budgets (docs/protocol.md#reads).
-- include: lib/ledger_util.lua lib/keys.lua
-- Walks the tenant's budgets index ("<scope_path>|<UNIT>", lex order), keeps
-- budgets whose scope path holds every filter segment exactly (values already
-- lowercased) and, when set, the unit. Bounded: scans at most ARGV[3] entries.
--
-- KEYS: 1 tenant_prefix
--       2 budget_index
-- ARGV: 1 after          exclusive start member ('' = from the beginning)
--       2 limit
--       3 scan_budget
--       4 unit           unit filter ('' = every unit)
--       5 segments       segment filters (JSON array of "level:value")
-- Result: ok({rows = [{unit, <balance_of fields>}...], more = bool, last = '<member>'})
-- Refusals: INTERNAL_ERROR (a budget's balance is corrupt).

local after = ARGV[1]
local limit = small_int(ARGV[2]) or 50
local budget = small_int(ARGV[3]) or 1000
local unit_filter = ARGV[4]
local segs = jdecode(ARGV[5]) or {}

local rows, scanned, last, exhausted = {}, 0, after, false
while scanned < budget and #rows < limit and not exhausted do
  local chunk = math.min(100, budget - scanned)
  local from = '-'
  if last ~= '' then from = '(' .. last end
  local page = redis.call('ZRANGEBYLEX', KEYS[2], from, '+', 'LIMIT', 0, chunk)
  if #page < chunk then exhausted = true end
  for _, member in ipairs(page) do
    scanned = scanned + 1
    last = member
    local path, unit = string.match(member, '^(.*)|([^|]+)$')
    if path then
      local keep = (unit_filter == '' or unit == unit_filter)
      local padded = '/' .. path .. '/'
      for _, seg in ipairs(segs) do
        if keep and not string.find(padded, '/' .. seg .. '/', 1, true) then keep = false end
      end
      local key = key_budget(KEYS[1], path, unit)
      if keep and redis.call('EXISTS', key) == 1 then
        local b = balance_of(key, path)
        if b == nil then
          return fail('INTERNAL_ERROR', 'budget ' .. path .. ' ' .. unit .. ' holds a malformed balance',
            {scope = path, unit = unit})
        end
        b.unit = unit
        rows[#rows + 1] = b
        if #rows >= limit then break end
      end
    end
  end
end

local more = false
if last ~= '' then
  more = #redis.call('ZRANGEBYLEX', KEYS[2], '(' .. last, '+', 'LIMIT', 0, 1) > 0
end
return ok({rows = rows, more = more, last = last})
