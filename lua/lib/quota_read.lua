-- lib/quota_read.lua: reading the calendar quota counters of a day hash
-- (layout in lib/quota.lua) outside the hot path: the counter listing and
-- the reset. Included with "-- include: lib/quota_read.lua"; the reserve
-- reads the same value inline (quota_plan).

-- quota_value reads a calendar counter's value (raw, a hexadecimal string or
-- false):
-- its bucket in the day, n, thr and the second of the day of its last count
-- (numbers); nil when absent or malformed.
local function quota_value(raw)
  if not raw then return nil end
  local x = tonumber(raw, 16)
  if x == nil then return nil end
  local bod = x % 2048
  x = (x - bod) / 2048
  local sec = x % 131072
  x = (x - sec) / 131072
  local thr = x % 2
  return bod, (x - thr) / 2, thr, sec
end

-- quota_meta reads a calendar counter's '@' field: limit, policy id
-- (strings; '0' and '' when absent).
local function quota_meta(raw)
  if not raw then return '0', '' end
  local lmt, pol = string.match(raw, '^(%d+):(.*)$')
  return lmt or '0', pol or ''
end
