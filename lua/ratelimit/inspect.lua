#!lua flags=no-writes
-- ratelimit/inspect: an operator's view of one rate-limit key (read-only).
-- include: lib/ratelimit.lua
--
-- KEYS: 1 state_key    state key cy:rl:{<policy>:<key>}
-- ARGV: 1 algorithm    SLIDING_LOG | CAPPED_LOG | SLIDING_WINDOW | TOKEN_BUCKET | PACKED_LOG
--       2 limit
--       3 window_ms
-- Result   ok({type, count, memory_usage_bytes, encoding, ttl_ms, now})
--          type is Redis's TYPE ('none' when absent); count is the live usage
--          the algorithm would see now (0 when the key holds another
--          algorithm's state); memory_usage_bytes is MEMORY USAGE with every
--          element sampled (0 when unavailable); encoding is OBJECT ENCODING
--          ('unknown' where a store lacks it); ttl_ms is PTTL (-2 absent, -1 none).
-- Bounded: a PACKED_LOG key is decoded in one GET of at most 100000 slots.

local function dec(s, i)
  local a, b, c, d, e, f = string.byte(s, i, i + 5)
  if not f then return 0 end
  return ((((a * 256 + b) * 256 + c) * 256 + d) * 256 + e) * 256 + f
end

local key, alg = KEYS[1], ARGV[1]
local limit, window = int_arg(ARGV[2]), int_arg(ARGV[3])
if not limit or limit < 1 or not window or window < 1 then
  return fail('INVALID_REQUEST', 'malformed rate-limit arguments')
end

local now = now_ms()
local typ = redis.call('TYPE', key)
if type(typ) == 'table' then typ = typ.ok end
local count = 0

if typ == 'zset' and (alg == 'SLIDING_LOG' or alg == 'CAPPED_LOG') then
  count = redis.call('ZCOUNT', key, '(' .. string.format('%.0f', now - window), '+inf')
elseif typ == 'string' and alg == 'PACKED_LOG' then
  local s = redis.call('GET', key)
  if #s >= 25 and string.sub(s, 1, 1) == 'P' then
    local N, W = dec(s, 2), dec(s, 8)
    for i = W - 1, math.max(W - N, 0), -1 do
      if dec(s, 25 + (i % N) * 6 + 1) <= now - window then break end
      count = count + 1
    end
  end
elseif typ == 'hash' and alg == 'SLIDING_WINDOW' then
  local v = redis.call('HMGET', key, 'sw', 'c', 'p')
  local w, c, p = tonumber(v[1]), tonumber(v[2]) or 0, tonumber(v[3]) or 0
  if w then
    local idx = math.floor(now / window)
    local d = window - (now - idx * window)
    if idx == w + 1 then p, c = c, 0 elseif idx > w + 1 then p, c = 0, 0 elseif idx < w then d = window end
    count = c + math.floor(p * d / window)
  end
elseif typ == 'hash' and alg == 'TOKEN_BUCKET' then
  local v = redis.call('HMGET', key, 't', 'ts')
  local t, ts = tonumber(v[1]), tonumber(v[2])
  if t and ts then
    local el = math.max(0, math.min(window, now - ts))
    t = math.min(limit * window, t + el * limit)
    count = limit - math.floor(t / window)
  end
end

local mem = 0
if typ ~= 'none' then
  mem = redis.pcall('MEMORY', 'USAGE', key, 'SAMPLES', '0')
  if type(mem) ~= 'number' then mem = redis.pcall('MEMORY', 'USAGE', key) end
  if type(mem) ~= 'number' then mem = 0 end
end
local enc = 'none'
if typ ~= 'none' then
  enc = redis.pcall('OBJECT', 'ENCODING', key)
  if type(enc) ~= 'string' then enc = 'unknown' end
end
return ok({type = typ, count = count, memory_usage_bytes = mem, encoding = enc,
  ttl_ms = redis.call('PTTL', key), now = now})
