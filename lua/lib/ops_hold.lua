-- lib/ops_hold.lua: what one reservation holds, index paging and the sum of
-- ACTIVE holds per budget, shared by the operator scripts (lua/ops: audit,
-- repair, quarantine). Included with "-- include: lib/ops_hold.lua" (see internal/script).
-- Every key is derived from the tenant prefix "cy:{t:<tenant>}:" (one Cluster slot).
-- include: lib/record_layout.lua lib/keys.lua

local HOLD_FIELDS = {'state', 'estimate', 'unit', 'budgeted', 'expires_at', 'grace_ms',
  'quarantined_at', 'quarantine_reason', 'finalized_at', 'expired_at', 'scope_path'}
local TERMINAL_STATES = {COMMITTED = true, RELEASED = true, EXPIRED = true}
local HOLD_RETENTION_MS = 2592000000

-- is_small: a non-negative integer time/duration field (< 2^53, exact as a Lua number).
local function is_small(v)
  return type(v) == 'string' and #v <= 15 and string.find(v, '^%d+$') ~= nil
end

-- is_quarantined: flagged by the sweeper and not settled since. The sweeper
-- also quarantines records whose state is invalid (INVALID_STATE), so any
-- non-terminal state counts.
local function is_quarantined(h)
  return not h.missing and not h.wrong_type and h.quarantined_at ~= nil and not TERMINAL_STATES[h.state or '']
end

-- read_hold reads the fields of reservation id. The result has missing = true
-- when there is no record, wrong_type = true when the key is not a hash.
local function read_hold(prefix, id)
  local key = key_reservation(prefix, id)
  local h = {key = key, id = id}
  local v = redis.pcall('HMGET', key, unpack(HOLD_FIELDS))
  if type(v) == 'table' and v.err then
    h.wrong_type = true
    return h
  end
  local any = false
  for i, f in ipairs(HOLD_FIELDS) do
    if v[i] then h[f] = v[i]; any = true end
  end
  if not any and redis.call('EXISTS', key) == 0 then h.missing = true end
  return h
end

-- parse_estimate returns the canonical int64 estimate (>= 0) or nil. Stored
-- estimates are canonical already, so one pattern settles the common case.
local function parse_estimate(v)
  if type(v) ~= 'string' or v == '' then return nil end
  if v == '0' or (#v < 16 and string.find(v, '^[1-9]%d*$')) then return v end
  local e = i64_norm(v)
  if e == nil or i64_cmp(e, '0') < 0 then return nil end
  return e
end

local function unit_ok(u)
  return type(u) == 'string' and string.find(u, '^[A-Z_]+$') ~= nil
end

-- parse_hold validates what h holds, exactly as the sweeper does before an
-- expiry. Sets h.E (canonical estimate), h.scopes, h.unit_ok and h.deadline
-- (expires_at + grace_ms) when valid. Returns the first problem of the hold
-- (INVALID_ESTIMATE, MISSING_SCOPES, MALFORMED_SCOPES) or nil, then the
-- expiry problem (INVALID_EXPIRY) or nil.
local function parse_hold(h)
  local expiry_problem
  if is_small(h.expires_at) and is_small(h.grace_ms) then
    h.deadline = tonumber(h.expires_at) + tonumber(h.grace_ms)
  else
    expiry_problem = 'INVALID_EXPIRY'
  end
  h.unit_ok = unit_ok(h.unit)
  local scopes, problem = budgeted_scopes(h.budgeted, h.scope_path)
  if scopes == nil then return problem, expiry_problem end
  h.scopes = scopes
  h.E = parse_estimate(h.estimate)
  if h.E == nil or not h.unit_ok then
    h.E = nil
    return 'INVALID_ESTIMATE', expiry_problem
  end
  return nil, expiry_problem
end

-- zpage returns up to n {member, score} of zset key after the cursor
-- (after_member, after_score; '' = from the start), in rank order, and
-- whether the end was reached. A cursor member that is gone restarts at the
-- first entry of its score, so nothing is skipped (callers drop repeats).
local function zpage(key, after_member, after_score, n)
  local start = 0
  if after_member ~= nil and after_member ~= '' then
    local r = redis.call('ZRANK', key, after_member)
    if r then
      start = r + 1
    else
      start = redis.call('ZCOUNT', key, '-inf', '(' .. after_score)
    end
  end
  local raw = redis.call('ZRANGE', key, start, start + n - 1, 'WITHSCORES')
  local out = {}
  for i = 1, #raw, 2 do out[#out + 1] = {raw[i], raw[i + 1]} end
  return out, #out < n
end

-- active_holds sums the estimates of every ACTIVE reservation named by the
-- deadline index, the quarantine index or extra (ids found ACTIVE outside both
-- indexes), per budget member "<scope_path>|<UNIT>". Returns nil when more
-- than limit ids would be read (bounded work), else
--   {sums = {member -> E}, uncertain = {member -> true} (a holder whose
--    estimate does not parse, or a quarantined record in an invalid state,
--    which may or may not still be carried), quarantined = {member -> id}
--    (held by a quarantined reservation), all_uncertain = true when a
--    holder's scopes or unit do not parse, active = n}.
local function active_holds(prefix, limit, extra)
  local dl, qi = key_index(prefix, 'deadline'), key_index(prefix, 'quarantine')
  if redis.call('ZCARD', dl) + redis.call('ZCARD', qi) + #extra > limit then return nil end
  local seen, ids = {}, {}
  for _, list in ipairs({redis.call('ZRANGE', dl, 0, -1), redis.call('ZRANGE', qi, 0, -1), extra}) do
    for _, id in ipairs(list) do
      if not seen[id] then seen[id] = true; ids[#ids + 1] = id end
    end
  end
  local out = {sums = {}, uncertain = {}, quarantined = {}, all_uncertain = false, active = 0}
  local sums = {}
  -- Many records share one budgeted string: decode each distinct one once.
  local scope_cache = {}
  local function scopes_of(budgeted, scope_path)
    if budgeted == nil then return nil end
    local ck = budgeted
    if string.find(budgeted, '^%d+$') then ck = budgeted .. '|' .. (scope_path or '') end
    local c = scope_cache[ck]
    if c == nil then
      c = budgeted_scopes(budgeted, scope_path) or false
      scope_cache[ck] = c
    end
    return c or nil
  end
  for _, id in ipairs(ids) do
    local v = redis.pcall('HMGET', key_reservation(prefix, id), 'state', 'estimate', 'unit', 'budgeted', 'quarantined_at',
      'scope_path')
    if not (type(v) == 'table' and v.err) then
      local state, unit, q = v[1], v[3], v[5]
      local scopes = scopes_of(v[4] or nil, v[6] or nil)
      local ok_unit = unit_ok(unit)
      if q and state and state ~= 'ACTIVE' and not TERMINAL_STATES[state] then
        -- Quarantined with an invalid state: whether the budgets still carry it is unknown.
        if scopes and ok_unit then
          for _, s in ipairs(scopes) do
            out.quarantined[s .. '|' .. unit] = id
            out.uncertain[s .. '|' .. unit] = true
          end
        else
          out.all_uncertain = true
        end
      elseif state == 'ACTIVE' then
        out.active = out.active + 1
        if scopes and ok_unit then
          local E = parse_estimate(v[2] or nil)
          -- Sums stay Lua numbers while exact (< 2^53), strings beyond.
          local n = nil
          if E and #E < 16 then n = tonumber(E) end
          for _, s in ipairs(scopes) do
            local m = s .. '|' .. unit
            if q then out.quarantined[m] = id end
            if E == nil then
              out.uncertain[m] = true
            else
              local cur = sums[m] or 0
              if n and type(cur) == 'number' and cur + n < 9007199254740992 then
                sums[m] = cur + n
              else
                if type(cur) == 'number' then cur = string.format('%.0f', cur) end
                local sum = i64_add(cur, E)
                if sum == nil then out.uncertain[m] = true else sums[m] = sum end
              end
            end
          end
        else
          out.all_uncertain = true
        end
      end
    end
  end
  for m, v in pairs(sums) do
    if type(v) == 'number' then v = string.format('%.0f', v) end
    out.sums[m] = v
  end
  return out
end

-- HIDDEN_FIELDS are record fields an operator view leaves out (replay
-- snapshots and payload hashes: large, and not what a hold is).
local HIDDEN_FIELDS = {commit_hash = true, release_hash = true}

-- quarantine_row is the operator view of one record: its fields as stored
-- (minus HIDDEN_FIELDS) and, when estimate, unit and scopes parse, what it
-- holds on each budget beside that budget's stored reserved. nil when the
-- record is gone or not a hash.
local function quarantine_row(prefix, id)
  local reply = redis.pcall('HGETALL', key_reservation(prefix, id))
  if type(reply) == 'table' and reply.err then return nil end
  if #reply == 0 then return nil end
  local fields = {}
  for i = 1, #reply, 2 do
    -- Balance rows (rb<i>, cb<i>, lb<i>) are replay data.
    if not HIDDEN_FIELDS[reply[i]] and not string.find(reply[i], '^[rcl]b%d+$') then
      fields[reply[i]] = reply[i + 1]
    end
  end
  local h = read_hold(prefix, id)
  parse_hold(h)
  -- The operator view names the id and spells the budgeted scopes out as a
  -- JSON array (the record leaves the id out and packs the scopes as digits:
  -- docs/design.md#reservation-records).
  fields.id = fields.id or id
  if h.scopes and fields.budgeted and string.find(fields.budgeted, '^%d+$') then
    fields.budgeted = cjson.encode(h.scopes)
  end
  local holds = {}
  if h.E and h.scopes then
    for _, s in ipairs(h.scopes) do
      local p = BAL.parts(redis.pcall('HGET', key_budget(prefix, s, h.unit), 'bal'))
      local v = p and p[3] or ''
      holds[#holds + 1] = {scope = s, unit = h.unit, amount = h.E, reserved = v}
    end
  end
  return {id = id, reason = fields.quarantine_reason or '', at = fields.quarantined_at or '',
    fields = fields, holds = holds}
end
