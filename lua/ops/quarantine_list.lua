#!lua flags=no-writes
-- ops/quarantine_list: one page of a tenant's quarantined reservations (read-only).
-- include: lib/ops_hold.lua
--
-- KEYS: 1 tenant_prefix   "cy:{t:<tenant>}:"; the quarantine index (prefix ..
--                         "r:quarantine", id -> quarantined_at) and the records
--                         are derived from it
-- ARGV: 1 cursor_member   '' = start
--       2 cursor_score
--       3 page_size       1..500
-- Result ok(): the page's rows (lib/ops_hold.lua quarantine_row) and the next
-- page's cursor.
-- JSON ops/quarantine_list: rows[]{id reason at fields holds[]{scope unit amount reserved}}
--   next{member score} done
-- A quarantined record is flagged and not terminal (ACTIVE, or an invalid
-- state: INVALID_STATE). Entries whose record is gone, terminal or unflagged are left out (the audit
-- reports them as QUARANTINE_STALE and RepairTenant drops them).

local prefix = KEYS[1]
local n = tonumber(ARGV[3])
if not n or n < 1 or n > 500 then return fail('INVALID_REQUEST', 'page size must be 1..500') end
local page, done = zpage(key_index(prefix, 'quarantine'), ARGV[1], ARGV[2], n)
local rows = {}
for _, e in ipairs(page) do
  local r = quarantine_row(prefix, e[1])
  if r and is_quarantined(read_hold(prefix, e[1])) then rows[#rows + 1] = r end
end
local nxt = {member = '', score = ''}
if #page > 0 then nxt = {member = page[#page][1], score = page[#page][2]} end
return ok({rows = rows, next = nxt, done = done})
