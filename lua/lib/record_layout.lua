-- lib/record_layout.lua: the compact values of a reservation record
-- (docs/design.md#reservation-records, pkg/keys/records.go), written and read
-- by ledger, sweeper and operator scripts alike. Every value of a typical
-- record fits Redis' default hash-max-listpack-value (64 bytes), so the
-- record hash stays listpack-encoded. Readers also accept the layout of
-- records written before (JSON arrays, packed `rbal`/`cbal`).
-- Included with "-- include: lib/record_layout.lua" (see pkg/script).

-- scope_prefixes derives the affected scopes of a scope path (its cumulative
-- prefixes, root first; pkg/scope.Derive), so records need not store them.
local function scope_prefixes(path)
  local out, p = {}, 0
  while true do
    p = string.find(path, '/', p + 1, true)
    if p == nil then break end
    out[#out + 1] = string.sub(path, 1, p - 1)
  end
  out[#out + 1] = path
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

-- pack_budgeted is the record's `budgeted` value for paths (a subsequence of
-- prefixes, the scope path's prefixes): one digit per path, its 1-based
-- position in prefixes ("123" = every level of a 3-level path). A list that
-- is not such a subsequence (or deeper than 9 levels) stays a JSON array.
local function pack_budgeted(paths, prefixes)
  local out, j = '', 1
  for _, p in ipairs(paths) do
    while j <= #prefixes and prefixes[j] ~= p do j = j + 1 end
    if j > 9 or prefixes[j] == nil then return cjson.encode(paths) end
    out = out .. string.sub('123456789', j, j)
    j = j + 1
  end
  return out
end

-- unpack_budgeted is the inverse of pack_budgeted: the list of scope paths,
-- or nil when malformed. JSON (an array: records written before the compact
-- layout, operator requeues) is decoded as such, for the callers' own
-- checks; digits index the prefixes of scope_path.
local function unpack_budgeted(s, scope_path)
  if type(s) ~= 'string' or s == '' then return nil end
  local c = string.byte(s, 1)
  if c == 91 or c == 123 then -- '[' (or '{': cjson's empty table)
    local good, v = pcall(cjson.decode, s)
    if good and type(v) == 'table' then return v end
    return nil
  end
  if type(scope_path) ~= 'string' or string.find(s, '^[1-9]+$') == nil then return nil end
  local prefixes = scope_prefixes(scope_path)
  local out = {}
  for i = 1, #s do
    local p = prefixes[string.byte(s, i) - 48]
    if p == nil then return nil end
    out[i] = p
  end
  return out
end

-- BALANCE_ROW_MAX bounds the scope positions a balance row field may name
-- (rb1.., cb1.., lb1..); a record's budgeted list is at most six levels, a
-- longer requeued list keeps its rows readable up to here.
local BALANCE_ROW_MAX = 9

-- balance_fields appends to args the balance rows as fields '<tag><i>', row,
-- i being the row's position in paths (1-based). Rows come in paths' order
-- (some scopes may have none). A row is one balance (balance_now/balance_of
-- table) as "remaining,reserved,spent,allocated[,debt[,overdraft_limit[,over]]]",
-- the trailing fields left out while they are zero (over: 1 = over limit).
local function balance_fields(args, tag, rows, paths)
  local j, n = 1, #args
  for _, b in ipairs(rows) do
    while paths[j] ~= nil and paths[j] ~= b.scope_path do j = j + 1 end
    if paths[j] == nil or j > BALANCE_ROW_MAX then break end
    local row = b.remaining .. ',' .. b.reserved .. ',' .. b.spent .. ',' .. b.allocated
    if b.is_over_limit then
      row = row .. ',' .. b.debt .. ',' .. b.overdraft_limit .. ',1'
    elseif b.overdraft_limit ~= '0' then
      row = row .. ',' .. b.debt .. ',' .. b.overdraft_limit
    elseif b.debt ~= '0' then
      row = row .. ',' .. b.debt
    end
    args[n + 1] = tag .. string.sub('123456789', j, j)
    args[n + 2] = row
    n = n + 2
    j = j + 1
  end
  return args
end

-- record_replay returns the readers only replays (and a dry run's DENY) need:
-- {implied_subject, balances_in, read_balances}. Built on first use, so the
-- scripts' common paths do not pay for defining them on every call.
local function record_replay()
  -- implied_subject is the subject JSON of a subject that names exactly the
  -- levels of its scope path ({"tenant":"acme","workspace":"prod"}: what
  -- pkg/ledger stores for it, pkg/keys.ImpliedSubject). A reserve receives
  -- '' for such a subject and leaves the `subject` field out; readers
  -- rebuild it from scope_path.
  local function implied_subject(scope_path)
    local out = {}
    for k, v in string.gmatch(scope_path, '([^/:]+):([^/]*)') do
      out[#out + 1] = '"' .. k .. '":"' .. v .. '"'
    end
    return '{' .. table.concat(out, ',') .. '}'
  end

  -- balance_from builds a balance table from a row's values (balance_now's
  -- shape: same constructor, so cjson encodes it in the same key order); nil
  -- when malformed.
  local function balance_from(path, f)
    if #f < 4 or #f > 8 or path == nil then return nil end
    return {
      scope_path = path,
      remaining = f[1], reserved = f[2], spent = f[3],
      allocated = f[4], debt = f[5] or '0', overdraft_limit = f[6] or '0',
      is_over_limit = (f[7] == '1'),
    }
  end

  local function split_row(row)
    local f = {}
    for v in string.gmatch(row, '[^,]+') do f[#f + 1] = v end
    return f
  end

  -- balances_in builds the balance rows '<tag>1'.. of record fields f (the
  -- record's fields, e.g. from HGETALL) for the scopes in paths, in their
  -- order (positions without a row are skipped); nil when malformed.
  local function balances_in(f, tag, paths)
    local out = {}
    for i = 1, math.min(#paths, BALANCE_ROW_MAX) do
      local row = f[tag .. string.sub('123456789', i, i)]
      if row then
        local b = balance_from(paths[i], split_row(row))
        if b == nil then return nil end
        out[#out + 1] = b
      end
    end
    return out
  end

  -- read_balances reads the balance rows '<tag>1'.. of record key for the
  -- scopes in paths (balances_in). legacy is the record's packed field of
  -- earlier records ('rbal'/'cbal': "i,remaining,...,over" rows joined by
  -- ';'), used when present. nil when malformed.
  local function read_balances(key, tag, legacy, paths)
    if legacy then
      local out = {}
      for row in string.gmatch(legacy, '[^;]+') do
        local f = split_row(row)
        if #f ~= 8 then return nil end
        local b = balance_from(paths[tonumber(f[1]) or 0], {f[2], f[3], f[4], f[5], f[6], f[7], f[8]})
        if b == nil then return nil end
        out[#out + 1] = b
      end
      return out
    end
    local n = math.min(#paths, BALANCE_ROW_MAX)
    if n == 0 then return {} end
    local names = {}
    for i = 1, n do names[i] = tag .. string.sub('123456789', i, i) end
    local v = redis.call('HMGET', key, unpack(names))
    local f = {}
    for i = 1, n do
      if v[i] then f[names[i]] = v[i] end
    end
    return balances_in(f, tag, paths)
  end

  return {implied_subject = implied_subject, balances_in = balances_in, read_balances = read_balances}
end
