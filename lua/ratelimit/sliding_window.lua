-- ratelimit/sliding_window: SLIDING_WINDOW, two fixed-window counters
-- weighted by overlap. O(1) memory and work per key.
-- include: lib/ratelimit.lua
--
-- KEYS: 1 state_key    state key cy:rl:{<policy>:<key>}: hash sw = current window index
--          (floor(now / window)), c = hits in it, p = hits in the previous one
-- ARGV: 1 limit        (1..1e8)
--       2 window_ms    (1..86400000)
--       3 hits         (1..limit)
--       4 shadow       '1' decides and counts but never denies
--       5 ttl_ms       = 2 x window + slack (the previous window's count is read
--          during the whole next window)
-- Result   decision(allowed, shadow_denied, count, remaining, limit, reset_after_ms,
--              retry_after_ms, now) (lib/ratelimit.lua: a flat reply)   count = floor(estimate) after the decision
-- Refusal  INVALID_REQUEST (malformed arguments, hits > limit), before any write.
--
-- With e = now - start of the current window, the estimate is
--   p x (window - e) / window + c
-- and a request fits iff estimate + hits <= limit, decided in exact integer
-- arithmetic: p x (window - e) <= (limit - c - hits) x window (both sides
-- < 2^53 by the policy bounds). It assumes the previous window's hits were
-- spread evenly. Error bound: hits served in any true sliding window are at
-- most limit x (1 + e/window) < 2 x limit (all previous hits at its very end);
-- and it may deny while the true sliding count is lower (previous hits at its
-- start). Denied hits are not counted; in shadow mode every hit is.

-- floor(a / b) for integers 0 <= a, 1 <= b, a and b < 2^53, exactly.
local function idiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end

local key = KEYS[1]
local limit, window, hits, shadow, ttl, clock = check_args()
if not limit then return window end

local now = clock
local v = redis.pcall('HMGET', key, 'sw', 'c', 'p', 't')
if v.err or v[4] then
  -- Another algorithm's state (policy changed algorithm): start afresh.
  redis.call('DEL', key)
  v = {}
end
local idx = math.floor(now / window)
local w, c, p = tonumber(v[1]), tonumber(v[2]) or 0, tonumber(v[3]) or 0
local elapsed = now - idx * window
if w == nil then
  c, p = 0, 0
elseif idx == w + 1 then
  p, c = c, 0
elseif idx > w + 1 then
  p, c = 0, 0
elseif idx < w then
  -- Redis TIME stepped back: stay at the start of the stored window.
  idx, elapsed, now = w, 0, w * window
end
local d = window - elapsed -- weight of the previous window, 1..window

local fits
local r = 0
if c + hits > limit then
  fits = false
else
  r = (limit - c - hits) * window
  fits = p == 0 or p <= idiv(r, d)
end

local retry = 0
if not fits and not shadow then
  if c + hits > limit then
    -- Wait for the next window, then until c (as its previous) weighs little enough.
    local e2 = window - idiv((limit - hits) * window, c)
    retry = d + e2
  else
    retry = d - idiv(r, p)
  end
end

if fits or shadow then
  c = c + hits
  redis.call('HSET', key, 'sw', string.format('%.0f', idx), 'c', string.format('%.0f', c), 'p', string.format('%.0f', p))
  -- TTL from the (possibly clamped) decision time, so a clock step back never
  -- expires a key whose newest hit is still live.
  redis.call('PEXPIRE', key, ttl + now - clock)
end

local count = c + math.floor(p * d / window)
if count > 1e13 then count = 1e13 end
local reset = 0
if c > 0 then reset = d + window elseif p > 0 then reset = d end
local remaining = limit - count
if remaining < 0 then remaining = 0 end
return decision(fits or shadow, shadow and not fits, count, remaining, limit, reset, retry, now)
