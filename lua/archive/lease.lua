-- archive/lease: the archiver's lease, so one replica archives at a time, and
-- its fencing token (internal/archiver). The fence grows on every new
-- holder; PostgreSQL refuses a batch whose fence is older than the one its
-- stream last recorded (internal/archive Write), so a replica whose lease
-- lapsed mid-batch cannot write behind its successor.
--
-- KEYS: 1 lease    hash cy:{archive}:lease {owner, fence} (PEXPIRE ttl)
--       2 fence    counter cy:{archive}:fence (no TTL: never goes back)
-- ARGV: 1 op       'acquire' (take or renew) | 'release' (give up, if held)
--       2 owner    the replica's random id
--       3 ttl_ms   acquire only; 1000..600000
-- Result ok({held, fence, owner}): held is true when ARGV[2] holds the lease
--   (fence its token); else owner/fence name the holder ('' / 0 when none,
--   after a release).
-- Refusals: INVALID_REQUEST (op, owner or ttl malformed).

local op, owner = ARGV[1], ARGV[2]
if (op ~= 'acquire' and op ~= 'release') or type(owner) ~= 'string' or owner == '' or #owner > 64 then
  return fail('INVALID_REQUEST', 'lease op must be acquire or release, with an owner of 1..64 bytes')
end
local cur = redis.call('HMGET', KEYS[1], 'owner', 'fence')
if op == 'release' then
  if cur[1] == owner then redis.call('DEL', KEYS[1]) end
  return ok({held = false, fence = 0, owner = ''})
end
local ttl = tonumber(ARGV[3])
if not ttl or ttl < 1000 or ttl > 600000 or ttl ~= math.floor(ttl) then
  return fail('INVALID_REQUEST', 'lease ttl must be 1000..600000 ms')
end
if cur[1] == owner then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return ok({held = true, fence = tonumber(cur[2]) or 0, owner = owner})
end
if cur[1] then
  return ok({held = false, fence = tonumber(cur[2]) or 0, owner = cur[1]})
end
local fence = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], 'owner', owner, 'fence', fence)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return ok({held = true, fence = fence, owner = owner})
