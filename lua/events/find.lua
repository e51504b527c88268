#!lua flags=no-writes
-- events/find: look for one event id in a window of a tenant's event stream,
-- newest first (read only).
--
-- KEYS: 1 event_stream  cy:{t:<tenant>}:events (appended by emit_event in lib/core.lua)
-- ARGV: 1 event_id      the event id sought (the entry's 'id' field, lib/core.lua event_id)
--       2 from          the newest stream id to examine: '+' for the newest entry,
--                       or '(' .. <id> to continue below an id already examined
--       3 window        maximum entries to examine, 1..5000
--
-- Result ok({now, found = {id, f = {field = value, ...}} or absent,
--            last = id of the oldest entry examined ('' when none),
--            more = true when the window was full (older entries may remain)})
-- emit_event writes the 'id' field first, so an entry is matched on its first
-- field pair without decoding the rest; only the match is returned.
-- Refusals: INVALID_REQUEST (window out of range).
-- include: lib/paging.lua

local limit, refused = paging.size(ARGV[3], 5000, 'find window')
if not limit then return refused end
local now = now_ms()
local entries = redis.call('XREVRANGE', KEYS[1], ARGV[2], '-', 'COUNT', limit)
local res = {now = now, last = '', more = (#entries == limit)}
for _, e in ipairs(entries) do
  local f = e[2]
  if f[1] == 'id' and f[2] == ARGV[1] then
    res.found = {id = e[1], f = hmap(f)}
    return ok(res)
  end
  res.last = e[1]
end
return ok(res)
