#!lua flags=no-writes
-- policy/counters: one page of a tenant's live v0.1.26 action-quota counters
-- (docs/protocol.md#v0126-action-governance; layout in lib/quota.lua). Reads only.
-- include: lib/ledger_util.lua lib/quota.lua lib/quota_read.lua
--
-- KEYS: 1 tenant_record
--       2 counter_index    the tenant's counter index (<prefix>qidx)
-- ARGV: 1 scope            scope filter ('' = any; else the scope and those below it)
--       2 kind             kind filter ('' = any; '__risk__' = the risk-class counters)
--       3 window           window filter ('' = any)
--       4 cursor           '<offset into the live part of the index>' or
--                          '<offset>:<fields of that day hash already walked>'
--       5 page_size
--       6 run_id           run id filter ('' = any; else only per_run counters of that run)
--       7 include_zero     '1' = list counters at 0 too
-- JSON policy/counters: items next more
-- Result: ok(): items, each {scope, kind, risk class, window, window key, used,
-- limit, policy id, expires at ms, last count ms} (every value a string;
-- limit '0' and policy id '' when no current rule gives the counter one),
-- next = the cursor and more = bool. At most SCAN index entries are
--   read per call, so a page may be short while more follows. A day hash's
--   counters are walked in field order.
-- Refusals: TENANT_NOT_FOUND.

local SCAN = 1000
local now = now_ms()
if redis.call('EXISTS', KEYS[1]) == 0 then return fail('TENANT_NOT_FOUND', 'tenant not found') end
local prefix = string.sub(KEYS[1], 1, -7)
local off, skip = string.match(ARGV[4], '^(%d+):?(%d*)$')
off, skip = tonumber(off or '0') or 0, tonumber(skip) or 0
local lim = tonumber(ARGV[5]) or 50
local scope, below, run, zero = ARGV[1], ARGV[1] .. '/', ARGV[6] or '', ARGV[7] == '1'
-- in_scope: the filter's scope itself, or a path continuing it with '/'
-- (so tenant:acme never matches tenant:acme2).
local function in_scope(sc)
  return scope == '' or sc == scope or (sc ~= nil and string.sub(sc, 1, #below) == below)
end
-- wanted: a counter passes the filters.
local function wanted(sc, k, w, wk, n)
  return in_scope(sc) and (ARGV[2] == '' or k == ARGV[2]) and (ARGV[3] == '' or w == ARGV[3])
    and (run == '' or (w == 'per_run' and wk == run)) and (zero or n ~= '0')
end
-- day_items: the live counters of day hash k that pass the filters, in
-- field order, as {field position, item}. A counter's limit and policy:
-- its '@' field's (a per_tenant_per_day counter), else those the current
-- policies give it (QUOTA_MEMO.meta; meta caches the tenant fields read).
local meta = {}
local function day_items(k)
  local h = hgetall(k)
  local day = tonumber(string.match(k, 'qd:(%d+)$') or '')
  local names = {}
  for f in pairs(h) do
    -- '_' (the expiry) and the counters' '@' fields are not counters.
    if f ~= '_' and string.byte(f, -1) ~= 64 then names[#names + 1] = f end
  end
  table.sort(names)
  local out = {}
  for j, f in ipairs(names) do
    local sc, counted, code = string.match(f, '^(.*)|([^|]*)|(%a)$')
    local bod, n, _, sec = quota_value(h[f])
    if sc and bod and day and QUOTA_LEN[code] then
      local bn = day * (DAY_MS / QUOTA_LEN[code]) + bod
      local exp = (bn + 1) * QUOTA_LEN[code] + QUOTA_GRACE_MS
      local k_, rc = counted, ''
      local risk = string.match(counted, '^__risk__:(.*)$')
      if risk then k_, rc = '__risk__', risk end
      local w = POLICY_WNAME[code]
      n = ms(n)
      if exp > now and wanted(sc, k_, w, nil, n) then
        local lmt, pol = quota_meta(h[f .. '@'])
        if h[f .. '@'] == nil then lmt, pol = QUOTA_MEMO.meta(KEYS[1], sc, counted, code, now, meta) end
        out[#out + 1] = {j, {sc, k_, rc, w, quota_wkey(code, bn), n, lmt, pol, ms(exp), ms(day * DAY_MS + sec * 1000)}}
      end
    end
  end
  return out
end

local ks = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. ms(now), '+inf', 'LIMIT', off, SCAN)
local items, pos, more, next_ = {}, off, false, nil
for i, k in ipairs(ks) do
  if #items == lim then more = true; break end
  pos = off + i
  if string.sub(k, #prefix + 1, #prefix + 3) == 'qd:' then
    if run == '' then
      for _, it in ipairs(day_items(k)) do
        if it[1] > skip then
          if #items == lim then
            more, next_ = true, ms(off + i - 1) .. ':' .. ms(it[1] - 1)
            break
          end
          items[#items + 1] = it[2]
        end
      end
      if next_ then break end
    end
  else
    local v = redis.call('HMGET', k, 'n', 'lim', 'pol', 'at', 'exp', 'sc', 'k', 'rc', 'w', 'wk')
    if v[1] and wanted(v[6], v[7], v[9], v[10], v[1]) then
      items[#items + 1] = {v[6] or '', v[7] or '', v[8] or '', v[9] or '', v[10] or '', v[1], v[2] or '0', v[3] or '',
        v[5] or '0', v[4] or '0'}
    end
  end
  skip = 0
end
if not more and #ks == SCAN and pos == off + SCAN then more = true end
return ok({items = items, next = next_ or ms(pos), more = more})
