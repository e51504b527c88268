-- lib/ledger_snapshot.lua: the flat replies of the ledger mutations
-- (docs/design.md#script-replies), built from values a record keeps compactly
-- instead of a stored copy (docs/design.md#reservation-records).
-- Included by ledger scripts with "-- include: lib/ledger_snapshot.lua" (see internal/script).
-- include: lib/record_layout.lua
--
-- Every mutation answers okf({'OK', FLAT_V, '', '', <replay 0|1>, <extras>...,
-- <snapshot fields>...}). The snapshot fields are the response as a replay
-- returns it; the live call and its replay append them with the same
-- function from the same strings, so a replay is byte-identical to the
-- original. Amounts are decimal strings; '' is an absent field.
--
-- A balance list ("bal") is flat: 8 values per budget, in order
--   scope_path, remaining, reserved, spent, allocated, debt, overdraft_limit,
--   over ('1' | '0').
-- On the wire it is packed (every reply element costs Redis ~1k instructions):
-- the count of scope paths, the paths, then one string of rows
-- "i,remaining,reserved,spent,allocated,debt,overdraft_limit,over" joined by
-- ';', i the row's path index (1-based); a reserve or commit builds it from the values of the record's
-- balance rows rb<i>/cb<i> (lib/record_layout.lua compact_row), a replay
-- packs those rows again (record_replay().read_rows). A list of affected scopes
-- is its count and values; count 0 means "the scope path's prefixes"
-- (there is always at least one affected scope).
-- The layouts, in reply order after the executor's header, one per mutation
-- (machine-read: internal/ledger TestReplyLayoutsMatchLua checks them against
-- the Go declarations in internal/ledger/reply.go, whose struct tags are the
-- one definition; docs/design.md's reply table is generated from those).
-- Markers: ! an extra (known only to the live call: a replay answers the
-- rest), * a counted list, # a packed balance list, ? a trailing field that
-- some answers leave out (deny_detail and observed end DENY and observed
-- answers only). A reserve's empty affected list means the scope path's
-- prefixes.
-- REPLY ledger/reserve: !replay !rem_ttl !denied dry decision reason_code reservation_id
--   reserved unit expires_at_ms scope_path grace_ms policy caps *affected #balances
--   ?deny_detail ?observed
-- REPLY ledger/commit: !replay !overage !debt unit charged released debt_incurred #balances
-- REPLY ledger/release: !replay unit released #balances
-- REPLY ledger/extend: !replay !rem_ttl unit expires_at_ms extension_count #balances
-- REPLY ledger/decide: !replay !denied decision reason_code caps *affected ?deny_detail
-- REPLY ledger/event: !replay !debt event_id unit charged debt_incurred #balances

-- affected_arg reads the affected-scopes ARGV: '' when they are the scope
-- path's prefixes (what internal/scope.Derive always makes; no JSON to decode),
-- else a JSON array. nil when malformed.
local function affected_arg(arg, scope_path)
  if arg == '' then return scope_prefixes(scope_path) end
  return jdecode(arg)
end

-- push_list appends a count and the values of list to out.
local function push_list(out, list)
  local n = #out
  out[n + 1] = #list
  for i = 1, #list do out[n + 1 + i] = list[i] end
end

-- push_packed appends a packed balance list: the paths, then the rows.
local function push_packed(out, paths, packed)
  push_list(out, paths)
  out[#out + 1] = packed
end

-- ROW_INDEX are the row indexes of packed balances as strings (no
-- number->string conversion for the usual depths).
local ROW_INDEX = {'1', '2', '3', '4', '5', '6', '7', '8', '9', '10', '11', '12', '13', '14', '15', '16'}

-- pack_balances stores a flat balance list as
-- "i,remaining,reserved,spent,allocated,debt,overdraft_limit,over" rows joined
-- by ';', i being the row's scope index in paths (1-based).
local function pack_balances(bal, paths)
  local out = {}
  for r = 1, #bal / 8 do
    local n = (r - 1) * 8
    local idx = 0
    for j = 1, #paths do
      if paths[j] == bal[n + 1] then idx = j; break end
    end
    out[r] = (ROW_INDEX[idx] or tostring(idx)) .. ',' .. table.concat(bal, ',', n + 2, n + 8)
  end
  return table.concat(out, ';')
end

-- push_bal appends a flat balance list, packed with its own scope paths.
local function push_bal(out, bal)
  local paths = {}
  for r = 1, #bal / 8 do paths[r] = bal[(r - 1) * 8 + 1] end
  push_packed(out, paths, pack_balances(bal, paths))
end

-- push_rows appends balance tables (balance_of, or a decoded stored JSON
-- snapshot) packed with their own scope paths, without a flat list between.
local function push_rows(out, rows)
  local paths, packed = {}, {}
  for i, b in ipairs(rows or {}) do
    paths[i] = b.scope_path
    packed[i] = (ROW_INDEX[i] or tostring(i)) .. ',' .. b.remaining .. ',' .. b.reserved .. ',' .. b.spent .. ','
      .. b.allocated .. ',' .. b.debt .. ',' .. b.overdraft_limit .. ((b.is_over_limit == true) and ',1' or ',0')
  end
  push_packed(out, paths, table.concat(packed, ';'))
end

-- reserve_reply appends a live reservation's snapshot fields (strings as
-- stored; scopes nil when they are the scope path's prefixes, caps nil when
-- none; the balance rows packed, with the budgeted paths they index).
local function reserve_reply(out, rid, E, unit, expires_at, scope_path, scopes, caps, budgeted, rows, grace, policy)
  local n = #out
  out[n + 1], out[n + 2], out[n + 3], out[n + 4] = '0', caps and 'ALLOW_WITH_CAPS' or 'ALLOW', '', rid
  out[n + 5], out[n + 6], out[n + 7], out[n + 8] = E, unit, expires_at, scope_path
  out[n + 9], out[n + 10], out[n + 11] = grace, policy, caps or ''
  push_list(out, scopes or {})
  push_packed(out, budgeted, rows)
  return out
end

-- commit_reply appends a commit's snapshot fields (strings as stored; the
-- balance rows packed, with the budgeted paths they index).
local function commit_reply(out, unit, charged, budgeted, rows, debt, E)
  local released = ''
  if charged ~= E and i64_cmp(charged, E) < 0 then released = i64_sub(E, charged) end
  local n = #out
  out[n + 1], out[n + 2], out[n + 3], out[n + 4] = unit, charged, released, debt
  push_packed(out, budgeted, rows)
  return out
end

-- extend_reply_of appends an extension's snapshot fields from its JSON
-- object ({status, unit, expires_at_ms, balances, extension_count}).
local function extend_reply_of(out, s)
  local n = #out
  out[n + 1], out[n + 2], out[n + 3] = s.unit or '', s.expires_at_ms or '', s.extension_count or ''
  push_rows(out, s.balances)
  return out
end

-- decide_reply_of appends a decision's snapshot fields from its JSON object
-- ({decision, reason_code?, caps?, affected, deny_detail?}).
local function decide_reply_of(out, s)
  local n = #out
  out[n + 1], out[n + 2], out[n + 3] = s.decision or '', s.reason_code or '', s.caps or ''
  push_list(out, s.affected or {})
  out[#out + 1] = s.deny_detail and cjson.encode(s.deny_detail) or ''
  return out
end

-- event_reply_of appends a direct debit's snapshot fields from its JSON
-- object ({status, event_id, unit, charged?, balances, debt_incurred}).
local function event_reply_of(out, s)
  local n = #out
  out[n + 1], out[n + 2], out[n + 3], out[n + 4] = s.event_id or '', s.unit or '', s.charged or '', s.debt_incurred or ''
  push_rows(out, s.balances)
  return out
end
