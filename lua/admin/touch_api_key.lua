-- admin/touch_api_key: record that a key authenticated (last_used_at),
-- coarsely: at most one write per key per minute, whichever replica asks.
-- Runs off the request path (internal/admin keytouch.go), never inside a
-- ledger script.
--
-- KEYS: 1 api_key     API key hash
-- ARGV: none
-- JSON admin/touch_api_key: value
-- Result: ok(true) when written, ok(false) when the key is gone or was
--   touched less than a minute ago (by Redis TIME).
-- Refusals: none.

local last = redis.call('HMGET', KEYS[1], 'status', 'last_used_at')
if not last[1] then
  return ok(false)
end
local now = now_ms()
if last[2] and (tonumber(last[2]) or 0) > now - 60000 then
  return ok(false)
end
redis.call('HSET', KEYS[1], 'last_used_at', string.format('%.0f', now))
return ok(true)
