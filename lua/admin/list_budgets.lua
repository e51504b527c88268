#!lua flags=no-writes
-- admin/list_budgets: one page of a tenant's budgets in index (lex) order.
-- include: lib/keys.lua
--
-- KEYS: 1 tenant_prefix   the tenant's key prefix "cy:{t:T}:"; budget keys are
--                         derived from it as KEYS[1] .. "b:" .. <scope_path> ..
--                         ":" .. <UNIT> (same slot)
--       2 budget_index    the tenant's budget index (members "<scope_path>|<UNIT>", score 0)
-- ARGV: 1 unit            unit filter ('' = every unit)
--       2 page_size       1..200
--       3 scan            at most this many index entries are examined (bounds the work)
--       4.. ranges        ZRANGEBYLEX (min, max) pairs, walked in order; the
--                         caller builds them from the scope prefix and the cursor
-- JSON admin/list_budgets: items[]{m b} last more
-- Result: ok(): items {m = member, b = <budget hash>}, the last index member
-- consumed ('' if none) and more.
--   The next page starts after `last`. `more` is true when another matching
--   entry was seen, or (conservatively) when the examination bound was hit.
-- Read only. No string ordering comparisons in Lua (Redis may collate by locale);
-- ordering is ZRANGEBYLEX's byte order.

local unit = ARGV[1]
local limit = tonumber(ARGV[2])
local scan_left = tonumber(ARGV[3])
local suffix = '|' .. unit
local page, last, more, full = {}, '', false, false

local i = 4
while i + 1 <= #ARGV do
  if scan_left <= 0 then more = true break end
  local members = redis.call('ZRANGEBYLEX', KEYS[2], ARGV[i], ARGV[i + 1], 'LIMIT', 0, scan_left)
  for _, m in ipairs(members) do
    local match = (unit == '') or (string.sub(m, -#suffix) == suffix)
    if match and #page == limit then
      more, full = true, true
      break
    end
    scan_left = scan_left - 1
    last = m
    if match then page[#page + 1] = m end
  end
  if full then break end
  if scan_left <= 0 then more = true break end
  i = i + 2
end

local items = {}
for _, m in ipairs(page) do
  local sp, u = string.match(m, '^(.*)|([^|]*)$')
  if sp then
    local b = hgetall(key_budget(KEYS[1], sp, u))
    if next(b) ~= nil then items[#items + 1] = {m = m, b = b} end
  end
end
return ok({items = items, last = last, more = more})
