#!lua flags=no-writes
-- archive/queue: the oldest entries of a tenant's archive queue with the
-- records they name, for the archiver to copy to PostgreSQL
-- (internal/archiver). Reads only; archive/done trims once they are stored.
--
-- KEYS: 1 tenant_prefix   "cy:{t:<tenant>}:" (records derived: key_reservation)
--       2 archive_queue   cy:{t:<tenant>}:archq (stream: one entry {id} per
--                         settled reservation, appended by the settling script)
-- ARGV: 1 batch_size      1..1000
--       2 after           a queue entry id: only entries after it are returned
--                         (the archiver reads the next batch while PostgreSQL
--                         stores the one before, still queued); '': from the oldest
-- Result okf({'OK', FLAT_V, '', '', now_ms, pending (XLEN), n, then n times:
--   queue entry id, reservation id, field count k, k field/value pairs
--   (the record's HGETALL; k = 0 when the record is gone)}). Flat, so
--   every value reaches Go byte for byte.
-- Refusals: INVALID_REQUEST (batch size, after).
-- include: lib/keys.lua lib/paging.lua

local n, refused = paging.size(ARGV[1], 1000, 'batch size')
if not n then return refused end
if ARGV[2] and ARGV[2] ~= '' and not string.match(ARGV[2], '^%d+%-%d+$') then
  return fail('INVALID_REQUEST', 'after must be a stream id')
end
local start = paging.after(ARGV[2])
local out = {'OK', FLAT_V, '', '', now_ms(), redis.call('XLEN', KEYS[2])}
local entries = redis.call('XRANGE', KEYS[2], start, '+', 'COUNT', n)
-- k counts out's length: '#out' is a search of the table on every append.
local k = #out + 1
out[k] = #entries
for _, e in ipairs(entries) do
  local fields, rid = e[2], ''
  for i = 1, #fields, 2 do
    if fields[i] == 'id' then rid = fields[i + 1] end
  end
  local rec = {}
  if rid ~= '' then rec = redis.call('HGETALL', key_reservation(KEYS[1], rid)) end
  out[k + 1], out[k + 2], out[k + 3] = e[1], rid, #rec / 2
  k = k + 3
  for i = 1, #rec do out[k + i] = rec[i] end
  k = k + #rec
end
return okf(out)
