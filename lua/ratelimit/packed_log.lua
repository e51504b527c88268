-- ratelimit/packed_log: PACKED_LOG, an exact sliding log in a fixed-size ring
-- of the last `limit` hit timestamps, packed in one string.
-- include: lib/ratelimit.lua
--
-- KEYS: 1 state_key    state key cy:rl:{<policy>:<key>}: string
--            bytes 0..24   header: 'P', then four 6-byte big-endian integers:
--                          N (slots = limit), W (hits ever written),
--                          L (hint: oldest live write index), newest time (ms)
--            bytes 25..    N slots of 6 bytes: slot (i mod N) holds the time of
--                          write i; zero bytes = never written (always dead)
-- ARGV: 1 limit        (1..100000)
--       2 window_ms
--       3 hits         (1..limit)
--       4 shadow       '1' decides and counts but never denies
--       5 ttl_ms       = window + slack
-- Result   decision(allowed, shadow_denied, count, remaining, limit, reset_after_ms,
--              retry_after_ms, now) (lib/ratelimit.lua: a flat reply)
-- Refusal  INVALID_REQUEST (malformed arguments, hits > limit), before any write.
--
-- Why it equals SLIDING_LOG: the ring holds the newest N hits in time order,
-- and a time t is live iff t > now - window. If c hits are live, the ring's
-- oldest N - c slots are dead (or empty) and the rest live (when c >= N all
-- are live), so a request of h hits fits (c + h <= N) iff the h-th oldest slot,
-- the last one it would overwrite, is older than the window. Writing the h
-- slots is one or two SETRANGEs. The live count comes from the hint L: slots
-- only die in write order, so the first live write index is found by galloping
-- from L (one GETRANGE when nothing expired since the last request, O(log k)
-- when k hits expired). 6 bytes per slot hold any ms timestamp below 2^48
-- (year 10889) exactly; no Lua `struct` library is needed.
-- A served request (allowed, or any request in shadow mode) is written; a
-- denied one is not. A changed limit re-packs the newest live hits once
-- (O(N), bounded by the policy's 100000 slots).

local SLOT, H = 6, 25

local function enc(t)
  local b6 = t % 256; t = (t - b6) / 256
  local b5 = t % 256; t = (t - b5) / 256
  local b4 = t % 256; t = (t - b4) / 256
  local b3 = t % 256; t = (t - b3) / 256
  local b2 = t % 256; t = (t - b2) / 256
  return string.char(t % 256, b2, b3, b4, b5, b6)
end

local function dec(s, i)
  local a, b, c, d, e, f = string.byte(s, i, i + 5)
  if not f then return 0 end
  return ((((a * 256 + b) * 256 + c) * 256 + d) * 256 + e) * 256 + f
end

local key = KEYS[1]
local limit, window, hits, shadow, ttl, clock = check_args()
if not limit then return window end

local now = clock
local hdr = redis.pcall('GETRANGE', key, 0, H - 1)
if type(hdr) ~= 'string' then
  -- Another algorithm's state (policy changed algorithm): start afresh.
  redis.call('DEL', key)
  hdr = ''
end

local N, W, L, newest
if #hdr == H and string.sub(hdr, 1, 1) == 'P' then
  N, W, L, newest = dec(hdr, 2), dec(hdr, 8), dec(hdr, 14), dec(hdr, 20)
end
if newest and newest > now then now = newest end -- Redis TIME stepped back
local horizon = now - window

if N == nil or N < 1 then
  N, W, L, newest = limit, 0, 0, 0
  redis.call('SET', key, 'P' .. enc(N) .. enc(0) .. enc(0) .. enc(0) .. string.rep('\0', N * SLOT), 'KEEPTTL')
elseif N ~= limit then
  -- The policy's limit changed: keep the newest live hits that still fit.
  local s = redis.call('GET', key)
  local kept = {}
  local from = math.max(L, W - N, 0)
  for i = W - 1, from, -1 do
    if #kept >= limit then break end
    local pos = i % N
    local t = dec(s, H + pos * SLOT + 1)
    if t <= horizon then break end
    kept[#kept + 1] = enc(t)
  end
  local slots = {}
  for i = #kept, 1, -1 do slots[#slots + 1] = kept[i] end
  N, W, L = limit, #kept, 0
  redis.call('SET', key, 'P' .. enc(N) .. enc(W) .. enc(0) .. enc(newest) .. table.concat(slots)
    .. string.rep('\0', (N - W) * SLOT), 'KEEPTTL')
end

local function ts_at(i)
  local off = H + (i % N) * SLOT
  return dec(redis.call('GETRANGE', key, off, off + SLOT - 1), 1)
end

-- first = the oldest live write index; writes first..W-1 are live.
local lo = math.max(L, W - N, 0)
local first
if lo >= W or newest <= horizon then
  first = W
elseif ts_at(lo) > horizon then
  first = lo
else
  -- lo is dead and W-1 is live: gallop, then bisect (dead, live].
  local dead, live, step = lo, W - 1, 1
  while dead + step < live do
    local probe = dead + step
    if ts_at(probe) > horizon then live = probe; break end
    dead = probe
    step = step * 2
  end
  while live - dead > 1 do
    local mid = math.floor((dead + live) / 2)
    if ts_at(mid) > horizon then live = mid else dead = mid end
  end
  first = live
end

local count = W - first
local fits = count + hits <= N
local retry = 0
if not fits and not shadow then
  -- The slot this request would overwrite last: when it expires, it fits.
  retry = ts_at(W - N + hits - 1) + window - now
end

if fits or shadow then
  local t = enc(now)
  local p0 = W % N
  local n1 = math.min(hits, N - p0)
  redis.call('SETRANGE', key, H + p0 * SLOT, string.rep(t, n1))
  if hits > n1 then redis.call('SETRANGE', key, H, string.rep(t, hits - n1)) end
  W = W + hits
  newest = now
  count = math.min(count + hits, N)
  first = math.max(first, W - N)
  redis.call('SETRANGE', key, 1, enc(N) .. enc(W) .. enc(first) .. enc(newest))
  -- TTL from the (possibly clamped) decision time, so a clock step back never
  -- expires a key whose newest hit is still live.
  redis.call('PEXPIRE', key, ttl + now - clock)
elseif first ~= L then
  redis.call('SETRANGE', key, 13, enc(first))
end

local reset = 0
if count > 0 then reset = newest + window - now end
return decision(fits or shadow, shadow and not fits, count, N - count, N, reset, retry, now)
