#!lua flags=no-writes
-- audit/read: one page of an audit stream, in either order (the listing reads
-- newest first; an archiver reads oldest first and resumes after the last id).
--
-- KEYS: 1 audit_stream     audit stream
-- ARGV: 1 order            'desc' (newest first) | 'asc' (oldest first)
--       2 newest           the newest id to return, inclusive ('+' = no bound)
--       3 oldest           the oldest id to return, inclusive ('-' = no bound)
--       4 count            most entries, 1..1000
-- Result: ok([[<id>, <field>, <value>, ...], ...]) in the asked order
-- Refusals: INVALID_REQUEST (bad order or count).

local n = tonumber(ARGV[4])
if not n or n < 1 or n > 1000 then return fail('INVALID_REQUEST', 'count must be 1..1000') end
local rows
if ARGV[1] == 'desc' then
  rows = redis.call('XREVRANGE', KEYS[1], ARGV[2], ARGV[3], 'COUNT', n)
elseif ARGV[1] == 'asc' then
  rows = redis.call('XRANGE', KEYS[1], ARGV[3], ARGV[2], 'COUNT', n)
else
  return fail('INVALID_REQUEST', 'order must be asc or desc')
end
local out = {}
for i, r in ipairs(rows) do
  local e = {r[1]}
  for j = 1, #r[2] do e[#e + 1] = r[2][j] end
  out[i] = e
end
return ok(out)
