-- lib/ledger_release.lua: returning a reservation's hold to its budgeted scopes.
-- Included by ledger scripts with "-- include: lib/ledger_release.lua" (see pkg/script).
-- include: lib/ledger_reservation.lua

-- release_hold returns a reservation's estimate to every budget of its
-- snapshot (reserved -= E, remaining += E), overflow-checked before the first
-- write. Returns the budgets touched, or nil, code, message.
local function release_hold(prefix, r)
  local bs, err = reservation_budgets(prefix, r)
  if bs == nil then return nil, 'INTERNAL_ERROR', err end
  local res, rem = {}, {}
  for i, b in ipairs(bs) do
    res[i] = i64_sub(b.res, r.E)
    rem[i] = i64_add(b.rem, r.E)
    if res[i] == nil or rem[i] == nil then
      return nil, 'AMOUNT_OVERFLOW', 'releasing would overflow int64 at ' .. b.path
    end
  end
  for i, b in ipairs(bs) do
    redis.call('HSET', b.key, 'reserved', res[i], 'remaining', rem[i])
  end
  return bs
end
