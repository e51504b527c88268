#!lua flags=no-writes
-- archive/stream: the entries of an event or audit stream after the
-- archive's position, oldest first, for the archiver to copy to PostgreSQL
-- (internal/archiver). Reads only: the streams keep their own retention.
--
-- KEYS: 1 stream       a tenant's cy:{t:<tenant>}:events or cy:{t:<tenant>}:audit,
--                      or the global audit log cy:{audit}:log
-- ARGV: 1 position     the last entry id archived ('' = from the start)
--       2 batch_size   1..1000
-- Result okf({'OK', FLAT_V, '', '', now_ms, n, then n times: entry id,
--   field count k, k field/value pairs in stream order}). Flat, so every
--   value reaches Go byte for byte.
-- Refusals: INVALID_REQUEST (batch size).
-- include: lib/paging.lua

local n, refused = paging.size(ARGV[2], 1000, 'batch size')
if not n then return refused end
local entries = redis.call('XRANGE', KEYS[1], paging.after(ARGV[1]), '+', 'COUNT', n)
local out = {'OK', FLAT_V, '', '', now_ms(), #entries}
for _, e in ipairs(entries) do
  out[#out + 1] = e[1]
  out[#out + 1] = #e[2] / 2
  for i = 1, #e[2] do out[#out + 1] = e[2][i] end
end
return okf(out)
