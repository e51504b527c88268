-- ratelimit/sliding_log: SLIDING_LOG, the exact sliding log in a sorted set,
-- and CAPPED_LOG, the same log trimmed to the newest `cap` members.
-- include: lib/ratelimit.lua
--
-- KEYS: 1 state_key    state key cy:rl:{<policy>:<key>}: zset, member -> request time (ms)
-- ARGV: 1 limit        (hits per window, 1..100000)
--       2 window_ms
--       3 hits         (cost of this request, 1..limit)
--       4 shadow       '1' decides and counts but never denies
--       5 ttl_ms       = window + slack (slack >= 10% of the window)
--       6 cap          (CAPPED_LOG: >= limit; absent or 0: uncapped SLIDING_LOG)
-- Result   decision(allowed, shadow_denied, count, remaining, limit, reset_after_ms,
--              retry_after_ms, now) (lib/ratelimit.lua: a flat reply)   count = live hits after this decision
--                                      (at most cap when capped)
-- Refusal  INVALID_REQUEST (malformed arguments, hits > limit, 0 < cap < limit),
--          before any write.
--
-- An entry t is live at now iff t > now - window, so a request exactly
-- window ms after an earlier one no longer sees it. Steps, in one script:
-- prune (ZREMRANGEBYSCORE <= now - window) BEFORE counting (counting first
-- over-counts and denies falsely), count, decide, add one member per hit,
-- refresh PEXPIRE. A served request (allowed, or any request in shadow mode)
-- is recorded; a denied one is not, so the log holds the hits actually served.
--
-- Members are short and unique: a length letter plus a decimal sequence
-- ('a7', 'b10', ...), whose byte order is numeric order, so the newest member
-- (ZRANGE -1 -1) carries the last sequence. The clock is Redis TIME; if it
-- steps backwards the newest entry's time is used (the log stays ordered).
-- Rate-limit counts are not money: validation bounds them far below 2^53, so
-- Lua numbers are exact here.
--
-- CAPPED_LOG: after the same steps, ZREMRANGEBYRANK keeps the newest cap
-- members. The log only grows past the limit when everything is served
-- (shadow mode, or a lowered limit); the cap bounds it there, even under a
-- flood. Decisions stay exact: a trimmed log still holds >= cap >= limit live
-- entries, so it still denies, and the entry whose expiry a retry waits for
-- (rank count + hits - limit - 1 <= cap - 1) is among the kept ones. Above the
-- cap the log is no longer an audit record of every request: count saturates
-- at cap.

local key = KEYS[1]
local cap = 0
if ARGV[6] ~= nil and ARGV[6] ~= '' then cap = int_arg(ARGV[6]) end
local limit, window, hits, shadow, ttl, clock = check_args(function(limit)
  return cap ~= nil and not (cap > 0 and cap < limit)
end)
if not limit then return window end

local now = clock
local newest = redis.pcall('ZRANGE', key, -1, -1, 'WITHSCORES')
if newest.err then
  -- The policy changed algorithm: this key holds another algorithm's state.
  redis.call('DEL', key)
  newest = {}
end
local seq, newest_t = 0, nil
if newest[1] then
  newest_t = tonumber(newest[2])
  if newest_t > now then now = newest_t end
  seq = tonumber(string.sub(newest[1], 2)) or 0
end

redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
local count = redis.call('ZCARD', key)
if count == 0 then newest_t = nil end

local fits = count + hits <= limit
local retry = 0
if not fits and not shadow then
  -- The (count + hits - limit)-th oldest live hit must expire first.
  local r = redis.call('ZRANGE', key, count + hits - limit - 1, count + hits - limit - 1, 'WITHSCORES')
  retry = tonumber(r[2]) + window - now
end

if fits or shadow then
  local i = 0
  while i < hits do
    local n = math.min(hits - i, 500)
    local args = {}
    for s = seq + i + 1, seq + i + n do
      local d = string.format('%.0f', s)
      args[#args + 1] = now
      args[#args + 1] = string.char(96 + #d) .. d
    end
    redis.call('ZADD', key, unpack(args))
    i = i + n
  end
  count = count + hits
  newest_t = now
  if cap > 0 and count > cap then
    redis.call('ZREMRANGEBYRANK', key, 0, count - cap - 1)
    count = cap
  end
  -- TTL from the (possibly clamped) decision time, so a clock step back never
  -- expires a key whose newest hit is still live.
  redis.call('PEXPIRE', key, ttl + now - clock)
end

local reset = 0
if newest_t then reset = newest_t + window - now end
local remaining = limit - count
if remaining < 0 then remaining = 0 end
return decision(fits or shadow, shadow and not fits, count, remaining, limit, reset, retry, now)
