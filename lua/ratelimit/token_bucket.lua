-- ratelimit/token_bucket: TOKEN_BUCKET, burst-tolerant, O(1), two fields.
-- include: lib/ratelimit.lua
--
-- KEYS: 1 state_key    state key cy:rl:{<policy>:<key>}: hash t = tokens x window (integer
--          "units", so refill is exact), ts = time of t (ms)
-- ARGV: 1 limit        = bucket capacity, refilled at limit tokens per window (1..1e8)
--       2 window_ms    (1..86400000)
--       3 hits         = tokens this request takes (1..limit)
--       4 shadow       '1' decides and counts but never denies
--       5 ttl_ms       = window + slack (an empty bucket is full again after one
--          window, so an expired key and a full bucket are the same state)
-- Result   decision(allowed, shadow_denied, count, remaining, limit, reset_after_ms,
--              retry_after_ms, now) (lib/ratelimit.lua: a flat reply)   count = tokens in use = limit - remaining
-- Refusal  INVALID_REQUEST (malformed arguments, hits > limit), before any write.
--
-- Units: capacity U = limit x window (< 2^53 by the policy bounds); each ms
-- adds limit units. A request fits iff t >= hits x window. A denied request
-- takes nothing; in shadow mode a request takes what is there (never below 0).
-- A changed window rescales in-flight buckets for at most one window.

local key = KEYS[1]
local limit, window, hits, shadow, ttl, clock = check_args()
if not limit then return window end

local now = clock
local v = redis.pcall('HMGET', key, 't', 'ts', 'sw')
if v.err or v[3] then
  redis.call('DEL', key)
  v = {}
end
local cap = limit * window
local tokens, ts = tonumber(v[1]), tonumber(v[2])
if tokens == nil or ts == nil then
  tokens = cap
else
  if ts > now then now = ts end -- Redis TIME stepped back: no refill
  local elapsed = now - ts
  if elapsed > window then elapsed = window end
  tokens = tokens + elapsed * limit
  if tokens > cap then tokens = cap end
end

local need = hits * window
local fits = tokens >= need
local retry = 0
if not fits and not shadow then
  retry = math.ceil((need - tokens) / limit)
end
if fits or shadow then
  tokens = tokens - need
  if tokens < 0 then tokens = 0 end
  redis.call('HSET', key, 't', string.format('%.0f', tokens), 'ts', string.format('%.0f', now))
  -- TTL from the (possibly clamped) decision time, so a clock step back never
  -- expires a key whose newest hit is still live.
  redis.call('PEXPIRE', key, ttl + now - clock)
end

local remaining = math.floor(tokens / window)
return decision(fits or shadow, shadow and not fits, limit - remaining, remaining, limit,
  math.ceil((cap - tokens) / limit), retry, now)
