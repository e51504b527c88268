-- ratelimit/capped_log: CAPPED_LOG, the sliding log of ratelimit/sliding_log
-- trimmed to the newest `cap` members (cap >= limit).
--
-- KEYS[1]  state key cy:rl:{<policy>:<key>}: zset, member -> request time (ms)
-- ARGV[1]  limit (1..100000)
-- ARGV[2]  window_ms
-- ARGV[3]  hits (1..limit)
-- ARGV[4]  shadow: '1' decides and counts but never denies
-- ARGV[5]  ttl_ms = window + slack
-- ARGV[6]  cap (>= limit)
-- Result   ok({allowed, shadow_denied, count, remaining, limit, reset_after_ms,
--              retry_after_ms, now})   count is at most cap
-- Refusal  INVALID_REQUEST (malformed arguments, hits > limit, cap < limit).
--
-- Same steps as sliding_log, then ZREMRANGEBYRANK keeps the newest cap
-- members. The log only grows past the limit when everything is served
-- (shadow mode, or a lowered limit); the cap bounds it there, even under a
-- flood. Decisions stay exact: a trimmed log still holds >= cap >= limit live
-- entries, so it still denies, and the entry whose expiry a retry waits for
-- (rank count + hits - limit - 1 <= cap - 1) is among the kept ones. Above the
-- cap the log is no longer an audit record of every request: count saturates
-- at cap.

local function int_arg(v)
  if type(v) ~= 'string' or #v > 15 or not string.match(v, '^%d+$') then return nil end
  return tonumber(v)
end

local key = KEYS[1]
local limit, window, hits, ttl = int_arg(ARGV[1]), int_arg(ARGV[2]), int_arg(ARGV[3]), int_arg(ARGV[5])
local cap = int_arg(ARGV[6])
local shadow = ARGV[4] == '1'
if not limit or limit < 1 or not window or window < 1 or not hits or hits < 1 or not ttl or ttl < window
  or not cap or cap < limit then
  return fail('INVALID_REQUEST', 'malformed rate-limit arguments')
end
if hits > limit then
  return fail('INVALID_REQUEST', 'hits exceed the policy limit', {field = 'hits', hits = hits, limit = limit})
end

local now = now_ms()
local clock = now -- Redis's own clock, which PEXPIRE counts from
local newest = redis.pcall('ZRANGE', key, -1, -1, 'WITHSCORES')
if newest.err then
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
  if count > cap then
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
return ok({allowed = fits or shadow, shadow_denied = shadow and not fits, count = count, remaining = remaining,
  limit = limit, reset_after_ms = reset, retry_after_ms = retry, now = now})
