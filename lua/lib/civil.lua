-- lib/civil.lua: the UTC calendar date of a day number, for the scripts that
-- write dates themselves (Redis Lua has no os.date): the quota window keys
-- (lib/quota.lua) and the sweeper's ISO 8601 timestamps
-- (sweeper/expire_batch.lua). Included with "-- include: lib/civil.lua".

-- civil_date is the UTC civil date (year, month 1..12, day 1..31) of a day
-- number since 1970-01-01 (the days-from-civil inverse; integer arithmetic
-- on exact doubles).
local function civil_date(days)
  local z = days + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local d = doy - math.floor((153 * mp + 2) / 5) + 1
  local m = (mp < 10) and (mp + 3) or (mp - 9)
  local y = yoe + era * 400
  if m <= 2 then y = y + 1 end
  return y, m, d
end
