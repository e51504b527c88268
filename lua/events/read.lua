#!lua flags=no-writes
-- events/read: one window of a tenant's event stream (read only).
--
-- KEYS: 1 event_stream  cy:{t:<tenant>}:events (appended by emit_event in lib/core.lua)
-- ARGV: 1 from          first id to return, inclusive ('-' for the oldest retained
--                       entry); the caller passes the successor of its cursor
--       2 to            last id to return, inclusive ('+' for the newest)
--       3 count         maximum entries, 1..1000
--
-- Result ok({now, first, last, entries = [{id, f = {field = value, ...}}, ...]})
--   now:   Redis TIME in ms (the caller's only clock)
--   first: id of the oldest retained entry ('' when the stream is empty); a
--          cursor older than it may have lost entries to retention trimming
--   last:  id of the newest entry ('' when empty)
--   entries encodes as {} when empty.
-- Refusals: INVALID_REQUEST (read size out of range).
-- include: lib/paging.lua

local limit, refused = paging.size(ARGV[3], 1000, 'read size')
if not limit then return refused end
local now = now_ms()
local first, last = '', ''
local head = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)
if #head > 0 then
  first = head[1][1]
  last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)[1][1]
end
local entries = {}
if first ~= '' then
  for i, e in ipairs(redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[2], 'COUNT', limit)) do
    entries[i] = {id = e[1], f = hmap(e[2])}
  end
end
return ok({now = now, first = first, last = last, entries = entries})
