#!lua flags=no-writes
-- archive/queue: the oldest entries of a tenant's archive queue, for the
-- archiver to copy to PostgreSQL (internal/archiver). Reads only;
-- archive/done trims once they are stored. The records they name are read
-- by the archiver itself, with pipelined HGETALLs (script.ReadHashes): a
-- record passed through Lua cost Redis about twice its HGETALL.
--
-- KEYS: 1 archive_queue   cy:{t:<tenant>}:archq (stream: one entry {id} per
--                         settled reservation, appended by the settling script)
-- ARGV: 1 batch_size      1..1000
--       2 after           a queue entry id: only entries after it are returned
--                         (the archiver reads the next batch while PostgreSQL
--                         stores the one before, still queued); '': from the oldest
-- Result okf({'OK', FLAT_V, '', '', now_ms, pending (XLEN), n, then n times:
--   queue entry id, reservation id ('' when the entry names none)}).
-- Refusals: INVALID_REQUEST (batch size, after).
-- include: lib/paging.lua

local n, refused = paging.size(ARGV[1], 1000, 'batch size')
if not n then return refused end
if ARGV[2] and ARGV[2] ~= '' and not string.match(ARGV[2], '^%d+%-%d+$') then
  return fail('INVALID_REQUEST', 'after must be a stream id')
end
local start = paging.after(ARGV[2])
local out = {'OK', FLAT_V, '', '', now_ms(), redis.call('XLEN', KEYS[1])}
local entries = redis.call('XRANGE', KEYS[1], start, '+', 'COUNT', n)
-- k counts out's length: '#out' is a search of the table on every append.
local k = #out + 1
out[k] = #entries
for _, e in ipairs(entries) do
  local fields, rid = e[2], ''
  for i = 1, #fields, 2 do
    if fields[i] == 'id' then rid = fields[i + 1] end
  end
  out[k + 1], out[k + 2] = e[1], rid
  k = k + 2
end
return okf(out)
