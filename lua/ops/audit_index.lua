#!lua flags=no-writes
-- ops/audit_index: audit one page of a tenant's deadline or quarantine index (read-only).
-- include: lib/ops_hold.lua
--
-- KEYS: 1 tenant_prefix   "cy:{t:<tenant>}:"; the index (prefix .. "r:deadline"
--                         or "r:quarantine") and the records are derived from it
-- ARGV: 1 index           'deadline' | 'quarantine'
--       2 cursor_member   '' = start
--       3 cursor_score
--       4 page_size       1..1000
-- Result ok(): the page's findings, the next page's cursor and the entries read.
-- JSON ops/audit_index: rows[]{kind id msg ev fix} next{member score} done entries
-- Kinds: INDEX_ORPHAN (deadline entry without a record; fix: ZREM),
--   INDEX_FINALIZED (deadline entry of a terminal record; fix: ZREM),
--   QUARANTINE_STALE (quarantine entry whose record is gone, terminal or no
--   longer flagged; fix: ZREM).

local prefix, which = KEYS[1], ARGV[1]
if which ~= 'deadline' and which ~= 'quarantine' then return fail('INVALID_REQUEST', 'unknown index') end
local n = tonumber(ARGV[4])
if not n or n < 1 or n > 1000 then return fail('INVALID_REQUEST', 'page size must be 1..1000') end

local rows = {}
local page, done = zpage(key_index(prefix, which), ARGV[2], ARGV[3], n)
for _, e in ipairs(page) do
  local id, score = e[1], e[2]
  local h = read_hold(prefix, id)
  if which == 'deadline' then
    if h.missing then
      rows[#rows + 1] = {kind = 'INDEX_ORPHAN', id = id, msg = 'deadline index entry without a record',
        ev = {score = score}, fix = true}
    elseif TERMINAL_STATES[h.state or ''] then
      rows[#rows + 1] = {kind = 'INDEX_FINALIZED', id = id, msg = h.state .. ' record still in the deadline index',
        ev = {score = score, state = h.state}, fix = true}
    end
  elseif not is_quarantined(h) then
    local what = 'record is gone'
    if h.wrong_type then what = 'key is not a hash'
    elseif not h.missing and TERMINAL_STATES[h.state or ''] then what = 'record is ' .. tostring(h.state)
    elseif not h.missing then what = 'record is no longer flagged' end
    rows[#rows + 1] = {kind = 'QUARANTINE_STALE', id = id, msg = 'quarantine index entry is stale: ' .. what,
      ev = {state = h.state or ''}, fix = true}
  end
end
local nxt = {member = '', score = ''}
if #page > 0 then nxt = {member = page[#page][1], score = page[#page][2]} end
return ok({rows = rows, next = nxt, done = done, entries = #page})
