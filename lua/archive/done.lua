-- archive/done: after PostgreSQL committed a batch of a tenant's archive
-- queue (internal/archiver), start the hot-window TTL of the archived
-- records and remove their entries from the queue. Idempotent: a batch
-- finished twice (a replica that crashed before it learnt of the commit)
-- only sets the same TTL again.
--
-- KEYS: 1 tenant_prefix      "cy:{t:<tenant>}:" (records derived: key_reservation)
--       2 archive_queue      cy:{t:<tenant>}:archq
-- ARGV: 1 hot_retention_ms   -hot-retention; 1000..2^53
--       2.. entry_pairs      queue entry id, reservation id ('' when the entry
--                            named no record: only the entry is removed); at
--                            most 1000 pairs
-- Result ok({expiring = records given the TTL, removed = queue entries
--   removed}).
-- Refusals: INVALID_REQUEST (retention, odd or too many pairs).
-- include: lib/keys.lua

local hot = tonumber(ARGV[1])
if not hot or hot < 1000 or hot ~= math.floor(hot) then
  return fail('INVALID_REQUEST', 'hot retention must be at least 1000 ms')
end
if #ARGV % 2 ~= 1 or #ARGV > 2001 then
  return fail('INVALID_REQUEST', 'pairs of queue entry id and reservation id, at most 1000')
end
local expiring, ids = 0, {}
for i = 2, #ARGV, 2 do
  ids[#ids + 1] = ARGV[i]
  if ARGV[i + 1] ~= '' then
    expiring = expiring + redis.call('PEXPIRE', key_reservation(KEYS[1], ARGV[i + 1]), ARGV[1])
  end
end
local removed = 0
if #ids > 0 then removed = redis.call('XDEL', KEYS[2], unpack(ids)) end
return ok({expiring = expiring, removed = removed})
