-- audit/auth_refused: count one refused authentication of a peer and record
-- it in the non-tenant audit trail, aggregated so that a flood of bad keys
-- cannot fill Redis: a per-minute hash counts refusals per peer (at most
-- ARGV[3] peers; the rest share the field '*'), and an entry is appended only
-- for a peer's 1st, 10th, 100th, ... refusal of the minute (its metadata
-- carries the count so far). So one minute adds at most ARGV[3] + 1 hash
-- fields and, per peer, a handful of entries.
-- include: lib/audit.lua
--
-- KEYS: 1 audit_log           cy:{audit}:log
--       2 authfail_prefix     cy:{audit}:authfail: (the minute's hash is KEYS[2] .. <unix
--                             minute>: same hash tag, same slot; it expires after 2 minutes)
-- ARGV: 1 event_ctx           event context with its audit member (internal/eventctx.Arg)
--       2 peer                peer (IPv4 address or IPv6 /64)
--       3 max_peers           most peers counted separately per minute (>= 1)
-- Result: ok({count = <refusals of the peer this minute>, recorded = bool})
-- Refusals: INVALID_REQUEST (no audit member, bad bound).

local c = cjson.decode(ARGV[1])
local cap = tonumber(ARGV[3])
if type(c.audit) ~= 'table' or not cap or cap < 1 then
  return fail('INVALID_REQUEST', 'auth_refused needs an audit entry and a peer bound')
end
local now = now_ms()
local h = KEYS[2] .. string.format('%.0f', math.floor(now / 60000))
local peer = ARGV[2]
if peer == '' then peer = '?' end
if redis.call('HEXISTS', h, peer) == 0 and redis.call('HLEN', h) >= cap then peer = '*' end
local n = redis.call('HINCRBY', h, peer, 1)
if n == 1 then redis.call('PEXPIRE', h, 120000) end
local p = n
while p % 10 == 0 do p = p / 10 end
if p ~= 1 then
  return ok({count = n, recorded = false})
end
if type(c.audit.md) ~= 'table' then c.audit.md = {} end
c.audit.md.peer = peer
c.audit.md.refusals_this_minute = tostring(n)
audit_append(KEYS[1], c, now)
return ok({count = n, recorded = true})
