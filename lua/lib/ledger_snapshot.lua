-- lib/ledger_snapshot.lua: the reserve and commit answers, built from values a
-- record keeps compactly instead of a stored copy of the JSON
-- (docs/design.md#reservation-records).
-- Included by ledger scripts with "-- include: lib/ledger_snapshot.lua" (see pkg/script).
-- include: lib/record_layout.lua
--
-- The live call and its replay build the answer with the same functions from
-- the same strings, so a replay is byte-identical to the original.

-- reserve_snapshot is the live reserve's answer (strings as stored).
local function reserve_snapshot(rid, E, unit, expires_at, scope_path, scopes, caps, balances, grace, policy)
  return cjson.encode({
    decision = caps and 'ALLOW_WITH_CAPS' or 'ALLOW', reservation_id = rid, reserved = E, unit = unit,
    expires_at_ms = expires_at, scope_path = scope_path, affected = scopes,
    caps = caps, balances = balances, grace_ms = grace, policy = policy,
  })
end

-- commit_snapshot is the commit's answer (strings as stored).
local function commit_snapshot(unit, charged, balances, debt, E)
  local resp = {status = 'COMMITTED', unit = unit, charged = charged, balances = balances,
    debt_incurred = debt}
  if i64_cmp(charged, E) < 0 then resp.released = i64_sub(E, charged) end
  return cjson.encode(resp)
end
