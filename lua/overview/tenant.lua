#!lua flags=no-writes
-- overview/tenant: one tenant's part of the admin overview
-- (internal/overview, docs/protocol.md#admin-overview). Read only, bounded:
-- at most ARGV[2] budgets and ARGV[3] events are read.
-- include: lib/keys.lua
--
-- KEYS: 1 tenant_prefix   the tenant's key prefix "cy:{t:T}:" (budget keys are
--                         derived from it: key_budget, same slot)
--       2 tenant_record   the tenant record
--       3 budget_index    the tenant's budget index
--       4 event_stream    the tenant's event stream
-- ARGV: 1 window_ms       event window in ms (at most 7 days)
--       2 max_budgets     most budgets to read (0..10000)
--       3 max_events      most events to read (0..10000)
--       4 denial_after    the stream id a denial must be newer than to be
--                         returned ('' = any): the walk's tenth newest so far,
--                         so older entries are counted but not copied
--       5 expiry_after    the same for an expiry
-- Result: ok({now = Redis TIME ms, st = tenant status ('' = no record),
--   om = observe_mode, bn = budgets read, bmore = budgets left unread,
--   bs = {status = n}, bu = {unit = n}, over = n over limit, debt = n in debt,
--   ol = up to 10 [scope, unit, allocated, remaining, debt] over limit,
--   ds = up to 10 [scope, unit, debt, overdraft limit] in debt (both largest
--   debt first), en = events read, emore = window events left unread,
--   cats = {category = n}, reasons = {reason_code = n} (denials),
--   den / exp = up to 10 {id, f} reservation.denied / reservation.expired
--   entries, newest first})
-- Refusals: INVALID_REQUEST (a bound out of range). Amounts stay strings.

local window, bmax, emax = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local function bad(n, hi) return n == nil or n < 0 or n > hi or n ~= math.floor(n) end
if bad(window, 604800000) or bad(bmax, 10000) or bad(emax, 10000) then
  return fail('INVALID_REQUEST', 'overview/tenant: a bound is out of range')
end
local now = now_ms()
local out = {now = now, bn = 0, bmore = false, bs = {}, bu = {}, over = 0, debt = 0, ol = {}, ds = {},
  en = 0, emore = false, cats = {}, reasons = {}, den = {}, exp = {}}
local t = redis.call('HMGET', KEYS[2], 'status', 'observe_mode')
out.st, out.om = t[1] or '', t[2] or ''

-- gt compares two non-negative decimal integer strings exactly (no float,
-- no locale collation): longer is larger, else the first differing digit.
local function gt(a, b)
  if #a ~= #b then return #a > #b end
  for i = 1, #a do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x > y end
  end
  return false
end
-- top keeps list at most 10 rows, largest row[k] first.
local function top(list, row, k)
  local at = #list + 1
  while at > 1 and gt(row[k], list[at - 1][k]) do at = at - 1 end
  if at <= 10 then
    table.insert(list, at, row)
    if #list > 10 then list[11] = nil end
  end
end
local function digits(s)
  if s == nil or s == '' or not string.match(s, '^%d+$') then return '0' end
  return (string.gsub(s, '^0+(%d)', '%1'))
end

if bmax > 0 then
  local members = redis.call('ZRANGE', KEYS[3], 0, bmax)
  if #members > bmax then
    out.bmore = true
    members[#members] = nil
  end
  for _, m in ipairs(members) do
    local sp, u = string.match(m, '^(.*)|([^|]*)$')
    if sp then
      -- The packed balance (lib/core.lua BAL); a budget whose balance is
      -- absent or corrupt is left out of the overview.
      local st, rem, _, _, alloc, debt, lim, over = BAL.split(redis.call('HGET', key_budget(KEYS[1], sp, u), 'bal'))
      if st then
        out.bn = out.bn + 1
        out.bs[st] = (out.bs[st] or 0) + 1
        out.bu[u] = (out.bu[u] or 0) + 1
        debt = digits(debt)
        if over then
          out.over = out.over + 1
          top(out.ol, {sp, u, alloc, rem, debt}, 5)
        end
        if debt ~= '0' then
          out.debt = out.debt + 1
          top(out.ds, {sp, u, debt, lim}, 3)
        end
      end
    end
  end
elseif redis.call('EXISTS', KEYS[3]) == 1 then
  out.bmore = true
end

-- newer: stream id a is after b ('' = no bound); ms and sequence compared
-- as numbers (a ms count is exact in a double).
local function split(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms) or 0, tonumber(seq) or 0
end
local function newer(a, b)
  if b == '' then return true end
  local am, as = split(a)
  local bm, bs = split(b)
  return am > bm or (am == bm and as > bs)
end
local den_after, exp_after = ARGV[4] or '', ARGV[5] or ''

local from = tostring(math.max(0, now - window))
if emax > 0 then
  local entries = redis.call('XREVRANGE', KEYS[4], '+', from, 'COUNT', emax + 1)
  if #entries > emax then
    out.emore = true
    entries[#entries] = nil
  end
  for _, e in ipairs(entries) do
    local f = hmap(e[2])
    out.en = out.en + 1
    local cat = f.cat or ''
    out.cats[cat] = (out.cats[cat] or 0) + 1
    if f.type == 'reservation.denied' then
      local ok_, d = pcall(cjson.decode, f.data or '{}')
      local reason = (ok_ and type(d) == 'table' and type(d.reason_code) == 'string' and d.reason_code) or 'UNKNOWN'
      out.reasons[reason] = (out.reasons[reason] or 0) + 1
      if #out.den < 10 and newer(e[1], den_after) then out.den[#out.den + 1] = {id = e[1], f = f} end
    elseif f.type == 'reservation.expired' and #out.exp < 10 and newer(e[1], exp_after) then
      out.exp[#out.exp + 1] = {id = e[1], f = f}
    end
  end
elseif #redis.call('XREVRANGE', KEYS[4], '+', from, 'COUNT', 1) > 0 then
  out.emore = true
end
return ok(out)
