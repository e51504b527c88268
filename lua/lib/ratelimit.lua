-- lib/ratelimit.lua: argument parsing shared by the rate-limit scripts.
-- Included with "-- include: lib/ratelimit.lua" (see internal/script).
-- Rate-limit counts are not money: validation bounds them far below 2^53, so
-- Lua numbers are exact here.

-- int_arg parses a non-negative integer argument; nil when malformed.
local function int_arg(v)
  if type(v) ~= 'string' or #v > 15 or not string.match(v, '^%d+$') then return nil end
  return tonumber(v)
end

-- check_args reads the common Check arguments
--   ARGV[1] limit, ARGV[2] window_ms, ARGV[3] hits, ARGV[4] shadow ('1'), ARGV[5] ttl_ms
-- and returns limit, window, hits, shadow, ttl and clock, or nil and the
-- refusal. clock is Redis TIME in ms, which PEXPIRE counts from: a script
-- decides at now = clock, moved forward to its newest hit if Redis TIME
-- stepped back, and sets the state's TTL to ttl + now - clock.
-- extra_ok(limit), when given, is a script's own argument check, folded into
-- the "malformed" refusal.
local function check_args(extra_ok)
  local limit, window, hits, ttl = int_arg(ARGV[1]), int_arg(ARGV[2]), int_arg(ARGV[3]), int_arg(ARGV[5])
  if not limit or limit < 1 or not window or window < 1 or not hits or hits < 1 or not ttl or ttl < window
    or (extra_ok and not extra_ok(limit)) then
    return nil, fail('INVALID_REQUEST', 'malformed rate-limit arguments')
  end
  if hits > limit then
    return nil, fail('INVALID_REQUEST', 'hits exceed the policy limit', {field = 'hits', hits = hits, limit = limit})
  end
  return limit, window, hits, ARGV[4] == '1', ttl, now_ms()
end

-- decision is a check's answer as a flat reply (lua/lib/core.lua okf; read
-- by internal/ratelimit): allowed and shadow_denied as 1/0, then count,
-- remaining, limit, reset_after_ms, retry_after_ms and Redis's now, all
-- integers. No JSON to build here nor to parse in cyclesd on the hottest
-- path there is (a check per guarded RPC).
local function decision(allowed, shadow_denied, count, remaining, limit, reset, retry, now)
  return okf({'OK', FLAT_V, '', '', allowed and 1 or 0, shadow_denied and 1 or 0,
    count, remaining, limit, reset, retry, now})
end
