-- lib/record_layout.lua: the compact values of a reservation record
-- (docs/design.md#reservation-records, internal/keys/records.go), written and read
-- by ledger, sweeper and operator scripts alike. Every value of a typical
-- record fits Redis' default hash-max-listpack-value (64 bytes), so the
-- record hash stays listpack-encoded. This is the first and only layout:
-- the project was never released with another.
-- Included with "-- include: lib/record_layout.lua" (see internal/script).
--
-- The reservation hash's fields, in the order of their one definition
-- (internal/keys ReservationLayout, which says who writes each and what it
-- holds; machine-read by TestReservationLayoutMatchesLua). <i> numbers a
-- family of balance row fields by budgeted scope position (ROW_FIELD below).
-- RECORD reservation: state unit estimate scope_path affected budgeted created_at
--   expires_at grace_ms policy max_ext ext_count idem_key subject action charged
--   debt_incurred finalized_at expired_at metadata committed_metadata rb<i> caps qrun
--   exp0 extend_metadata commit_key commit_hash cb<i> metrics release_key release_hash
--   release_reason lb<i> quarantined_at quarantine_reason quarantine_resolution

-- scope_prefixes derives the affected scopes of a scope path (its cumulative
-- prefixes, root first; internal/scope.Derive), so records need not store them.
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
-- or nil when malformed. JSON (an array pack_budgeted could not pack, or an
-- operator requeue's list) is decoded as such, for the callers' own checks;
-- digits index the prefixes of scope_path.
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
  -- Every level budgeted ("123" on a 3-level path, the usual record): the
  -- prefixes themselves (a fresh table), no second list built.
  if #s == #prefixes and s == string.sub('123456789', 1, #s) then return prefixes end
  local out = {}
  for i = 1, #s do
    local p = prefixes[string.byte(s, i) - 48]
    if p == nil then return nil end
    out[i] = p
  end
  return out
end

-- budgeted_scopes is unpack_budgeted checked as a record's scope list must
-- be, for the scripts that judge a stored record (the sweeper's expiry, the
-- operator audit, repair and quarantine): the scope paths, or nil and
-- MISSING_SCOPES (none) or MALFORMED_SCOPES (not 1..6, one per scope level,
-- distinct non-empty paths of at most 1,024 bytes).
local function budgeted_scopes(budgeted, scope_path)
  if budgeted == nil or budgeted == '' then return nil, 'MISSING_SCOPES' end
  local scopes = unpack_budgeted(budgeted, scope_path)
  if type(scopes) ~= 'table' then return nil, 'MALFORMED_SCOPES' end
  if #scopes == 0 then
    if next(scopes) == nil then return nil, 'MISSING_SCOPES' end
    return nil, 'MALFORMED_SCOPES'
  end
  if #scopes > 6 then return nil, 'MALFORMED_SCOPES' end
  local seen = {}
  for i = 1, #scopes do
    local s = scopes[i]
    if type(s) ~= 'string' or s == '' or #s > 1024 or seen[s] then return nil, 'MALFORMED_SCOPES' end
    seen[s] = true
  end
  return scopes
end

-- BALANCE_ROW_MAX bounds the scope positions a balance row field may name
-- (rb1.., cb1.., lb1..); a record's budgeted list is at most six levels, a
-- longer requeued list keeps its rows readable up to here.
local BALANCE_ROW_MAX = 9

-- compact_row is a balance row field's value:
-- "remaining,reserved,spent,allocated[,debt[,overdraft_limit[,over]]]", the
-- trailing fields left out while they are zero (over: true = over limit).
-- Readers restore the left-out fields as '0' (record_replay().packed_rows).
local function compact_row(rem, res, spent, alloc, debt, lim, over)
  -- One concatenation per row (every intermediate string is an allocation).
  if over then return rem .. ',' .. res .. ',' .. spent .. ',' .. alloc .. ',' .. debt .. ',' .. lim .. ',1' end
  if lim ~= '0' then return rem .. ',' .. res .. ',' .. spent .. ',' .. alloc .. ',' .. debt .. ',' .. lim end
  if debt ~= '0' then return rem .. ',' .. res .. ',' .. spent .. ',' .. alloc .. ',' .. debt end
  return rem .. ',' .. res .. ',' .. spent .. ',' .. alloc
end

-- ROW_FIELD names the balance row fields of each tag by scope position.
local ROW_FIELD = {
  rb = {'rb1', 'rb2', 'rb3', 'rb4', 'rb5', 'rb6', 'rb7', 'rb8', 'rb9'},
  cb = {'cb1', 'cb2', 'cb3', 'cb4', 'cb5', 'cb6', 'cb7', 'cb8', 'cb9'},
  lb = {'lb1', 'lb2', 'lb3', 'lb4', 'lb5', 'lb6', 'lb7', 'lb8', 'lb9'},
}

-- balance_fields appends to args the balance rows as fields '<tag><i>', row,
-- i being the row's position in paths (1-based). Rows come in paths' order
-- (some scopes may have none). A row is one balance (balance_now/balance_of
-- table) as compact_row.
local function balance_fields(args, tag, rows, paths)
  local j, n = 1, #args
  for _, b in ipairs(rows) do
    while paths[j] ~= nil and paths[j] ~= b.scope_path do j = j + 1 end
    if paths[j] == nil or j > BALANCE_ROW_MAX then break end
    args[n + 1] = ROW_FIELD[tag][j]
    args[n + 2] = compact_row(b.remaining, b.reserved, b.spent, b.allocated, b.debt, b.overdraft_limit, b.is_over_limit)
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
  -- internal/ledger stores for it, internal/keys.ImpliedSubject). A reserve receives
  -- '' for such a subject and leaves the `subject` field out; readers
  -- rebuild it from scope_path.
  local function implied_subject(scope_path)
    local out = {}
    for k, v in string.gmatch(scope_path, '([^/:]+):([^/]*)') do
      out[#out + 1] = '"' .. k .. '":"' .. v .. '"'
    end
    return '{' .. table.concat(out, ',') .. '}'
  end

  -- packed_rows packs the balance rows '<tag>1'.. of record fields f (the
  -- record's fields, e.g. from HGETALL or HMGET) for the scopes in paths into
  -- the flat replies' packed form (lib/ledger_snapshot.lua: "i,remaining,
  -- reserved,spent,allocated,debt,overdraft_limit,over" joined by ';'), the
  -- left-out trailing fields restored as '0'. dense: index the rows by their
  -- position among the rows present (with the paths they name, as push_rows
  -- sends them) instead of by scope position (with paths, as a reserve or
  -- commit sends them). Returns the paths sent and the packed rows; nil when
  -- a row is malformed.
  local function packed_rows(f, tag, paths, dense)
    local names, sent, out = ROW_FIELD[tag], {}, {}
    for i = 1, math.min(#paths, BALANCE_ROW_MAX) do
      local row = f[names[i]]
      if row then
        local v, k = {}, 0
        for x in string.gmatch(row, '[^,]+') do k = k + 1; v[k] = x end
        if k < 4 or k > 7 then return nil end
        sent[#sent + 1] = paths[i]
        out[#out + 1] = (dense and #out + 1 or i) .. ',' .. v[1] .. ',' .. v[2] .. ',' .. v[3] .. ',' .. v[4] .. ','
          .. (v[5] or '0') .. ',' .. (v[6] or '0') .. ',' .. (v[7] == '1' and '1' or '0')
      end
    end
    if not dense then sent = paths end
    return sent, table.concat(out, ';')
  end

  -- read_rows reads the balance rows '<tag>1'.. of record key for the scopes
  -- in paths and packs them (packed_rows, by scope position).
  local function read_rows(key, tag, paths)
    local n = math.min(#paths, BALANCE_ROW_MAX)
    if n == 0 then return paths, '' end
    local names = ROW_FIELD[tag]
    local v = redis.call('HMGET', key, unpack(names, 1, n))
    local f = {}
    for i = 1, n do
      if v[i] then f[names[i]] = v[i] end
    end
    return packed_rows(f, tag, paths, false)
  end

  return {implied_subject = implied_subject, packed_rows = packed_rows, read_rows = read_rows}
end
