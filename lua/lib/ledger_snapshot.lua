-- lib/ledger_snapshot.lua: the reserve and commit answers, built from values a
-- record keeps compactly instead of a stored copy of the JSON
-- (docs/design.md#reservation-records).
-- Included by ledger scripts with "-- include: lib/ledger_snapshot.lua" (see pkg/script).
--
-- The live call and its replay build the answer with the same functions from
-- the same strings, so a replay is byte-identical to the original.

-- scope_prefixes derives the affected scopes of a scope path (its cumulative
-- prefixes, root first; pkg/scope.Derive), so records need not store them.
local function scope_prefixes(path)
  local out, acc = {}, nil
  for seg in string.gmatch(path, '[^/]+') do
    if acc then acc = acc .. '/' .. seg else acc = seg end
    out[#out + 1] = acc
  end
  return out
end

-- same_list reports whether two arrays of strings are equal.
local function same_list(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do
    if a[i] ~= b[i] then return false end
  end
  return true
end

-- pack_balances stores balance rows (balance_now/balance_of tables) as
-- "i,remaining,reserved,spent,allocated,debt,overdraft_limit,over" rows joined
-- by ';', i being the row's scope index in paths (1-based).
local function pack_balances(rows, paths)
  local out = {}
  for n, b in ipairs(rows) do
    local idx = 0
    for j, p in ipairs(paths) do
      if p == b.scope_path then idx = j; break end
    end
    out[n] = table.concat({idx, b.remaining, b.reserved, b.spent, b.allocated, b.debt, b.overdraft_limit,
      b.is_over_limit and '1' or '0'}, ',')
  end
  return table.concat(out, ';')
end

-- unpack_balances is the inverse of pack_balances; nil when malformed. The
-- rows have balance_now's shape (same constructor, so cjson encodes them in
-- the same key order).
local function unpack_balances(s, paths)
  local out = {}
  if s == nil or s == false then return nil end
  for row in string.gmatch(s, '[^;]+') do
    local f = {}
    for v in string.gmatch(row, '[^,]+') do f[#f + 1] = v end
    local path = paths[tonumber(f[1]) or 0]
    if #f ~= 8 or path == nil then return nil end
    out[#out + 1] = {
      scope_path = path,
      remaining = f[2], reserved = f[3], spent = f[4],
      allocated = f[5], debt = f[6], overdraft_limit = f[7],
      is_over_limit = (f[8] == '1'),
    }
  end
  return out
end

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
