#!lua flags=no-writes
-- policy/counters: one page of a tenant's live v0.1.26 action-quota counters
-- (docs/protocol.md#v0126-action-governance; layout in lib/quota.lua). Reads only.
-- include: lib/ledger_util.lua
--
-- KEYS: 1 tenant_record
--       2 counter_index    the tenant's counter index (<prefix>qidx)
-- ARGV: 1 scope            scope filter ('' = any; else the scope and those below it)
--       2 kind             kind filter ('' = any; '__risk__' = the risk-class counters)
--       3 window           window filter ('' = any)
--       4 offset           offset into the live part of the index (the cursor)
--       5 page_size
--       6 run_id           run id filter ('' = any; else only per_run counters of that run)
--       7 include_zero     '1' = list counters at 0 too
-- Result: ok({items = {{scope, kind, risk class, window, window key, used,
--   limit, policy id, expires at ms, last count ms}, ...}, next = offset,
--   more = bool}) (every value a string). At most SCAN index entries are
--   read per call, so a page may be short while more follows.
-- Refusals: TENANT_NOT_FOUND.

local SCAN = 1000
local now = now_ms()
if redis.call('EXISTS', KEYS[1]) == 0 then return fail('TENANT_NOT_FOUND', 'tenant not found') end
local off, lim = tonumber(ARGV[4]) or 0, tonumber(ARGV[5]) or 50
local scope, below, run, zero = ARGV[1], ARGV[1] .. '/', ARGV[6] or '', ARGV[7] == '1'
-- in_scope: the filter's scope itself, or a path continuing it with '/'
-- (so tenant:acme never matches tenant:acme2).
local function in_scope(sc)
  return scope == '' or sc == scope or (sc ~= nil and string.sub(sc, 1, #below) == below)
end
local ks = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. ms(now), '+inf', 'LIMIT', off, SCAN)
local items, pos, more = {}, off, false
for i, k in ipairs(ks) do
  if #items == lim then more = true; break end
  pos = off + i
  local v = redis.call('HMGET', k, 'n', 'lim', 'pol', 'at', 'exp', 'sc', 'k', 'rc', 'w', 'wk')
  if v[1] and in_scope(v[6]) and (ARGV[2] == '' or v[7] == ARGV[2])
    and (ARGV[3] == '' or v[9] == ARGV[3]) and (run == '' or (v[9] == 'per_run' and v[10] == run))
    and (zero or v[1] ~= '0') then
    items[#items + 1] = {v[6] or '', v[7] or '', v[8] or '', v[9] or '', v[10] or '', v[1], v[2] or '0', v[3] or '',
      v[5] or '0', v[4] or '0'}
  end
end
if not more and #ks == SCAN and pos == off + SCAN then more = true end
return ok({items = items, next = ms(pos), more = more})
