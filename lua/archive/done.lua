-- archive/done: after PostgreSQL committed a batch of a tenant's archive
-- queue (internal/archiver), start the hot-window TTL of the archived
-- records and remove the batch from the queue. Idempotent: a batch
-- finished twice (a replica that crashed before it learnt of the commit)
-- only sets the same TTL again.
--
-- The queue is trimmed up to the batch's last entry (XTRIM MINID, then an
-- XDEL of that one entry), not entry by entry: XDEL of each id seeks it in
-- its listpack node, which made the trim the dearest part of the round
-- (about 11 µs of Redis per archived reservation; BENCHMARKS.md). The
-- archiver reads its queue from the head in order and finishes batches in
-- that order, so every entry before a batch's last one is in that batch or
-- in one finished before it; the settling scripts append with '*', so no
-- later entry can sort before it.
--
-- KEYS: 1 tenant_prefix      "cy:{t:<tenant>}:" (records derived: key_reservation)
--       2 archive_queue      cy:{t:<tenant>}:archq
-- ARGV: 1 hot_retention_ms   -hot-retention; 1000..2^53
--       2 last_entry         the batch's last queue entry id: the queue is
--                            trimmed up to it ('': nothing is trimmed)
--       3.. reservation_ids  the batch's archived records (entries that named
--                            no record have none here); at most 1000
-- Result ok({expiring = records given the TTL, removed = queue entries
--   removed}).
-- Refusals: INVALID_REQUEST (retention, too many ids, a last entry that is
--   no stream id).
-- include: lib/keys.lua

local hot = tonumber(ARGV[1])
if not hot or hot < 1000 or hot ~= math.floor(hot) then
  return fail('INVALID_REQUEST', 'hot retention must be at least 1000 ms')
end
if #ARGV < 2 or #ARGV > 1002 then
  return fail('INVALID_REQUEST', 'a last queue entry id and at most 1000 reservation ids')
end
local last = ARGV[2]
if last ~= '' and not string.match(last, '^%d+%-%d+$') then
  return fail('INVALID_REQUEST', 'queue entry ids must be stream ids')
end
local expiring, prefix = 0, KEYS[1]
for i = 3, #ARGV do
  expiring = expiring + redis.call('PEXPIRE', key_reservation(prefix, ARGV[i]), ARGV[1])
end
local removed = 0
if last ~= '' then
  removed = redis.call('XTRIM', KEYS[2], 'MINID', last) + redis.call('XDEL', KEYS[2], last)
end
return ok({expiring = expiring, removed = removed})
