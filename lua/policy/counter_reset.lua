-- policy/counter_reset: set one v0.1.26 action-quota counter to 0
-- (docs/protocol.md#v0126-action-governance; layout in lib/quota.lua).
-- include: lib/ledger_util.lua lib/quota.lua lib/quota_read.lua lib/audit.lua
-- Audit: on success, the call's audit entry in the same run (lib/audit.lua);
-- a refusal's entry is appended by the audit step after the call.
--
-- KEYS: 1 tenant_record
--       2 counter          the counter: a per_run counter's hash, or the day
--                          hash holding a calendar counter (lib/quota.lua)
--       3 counter_index    the tenant's counter index
--       4 event_stream     the tenant's event stream
--       5 audit_stream     the tenant's audit stream
-- ARGV: 1 event_ctx        event context (internal/eventctx.Arg; carries the audit entry)
--       2 reason
--       3 tenant_id
--       4 field            the calendar counter's field in the day hash ('' = per_run)
--       5 bucket           its window instance (decimal; calendar only)
-- A calendar counter keeps its expiry; a per_run counter's TTL is refreshed.
-- The threshold alert re-arms. Reservations holding counts are untouched
-- (their later give-back never takes the counter below 0). Emits
-- quota.counter_reset (category policy) with the previous count and the
-- counter window's correlation id (CORR.quota in lib/correlation.lua).
-- JSON policy/counter_reset: state previous
-- Result: ok(): state = {scope, kind, risk class, window, window key, used,
-- limit, policy id, expires at ms, last count ms}, previous = used before.
-- Refusals: TENANT_NOT_FOUND, NOT_FOUND (no live counter under that key).

local now = now_ms()
if redis.call('EXISTS', KEYS[1]) == 0 then return fail('TENANT_NOT_FOUND', 'tenant ' .. ARGV[3] .. ' not found') end
local NONE = 'no live action quota counter under those key fields'
local v
if ARGV[4] ~= '' then
  -- A calendar counter: live while its bucket (ARGV[5]) is the one counted
  -- and its end plus the grace is ahead.
  local raw = redis.call('HGET', KEYS[2], ARGV[4])
  local sc, counted, code = string.match(ARGV[4], '^(.*)|([^|]*)|(%a)$')
  local bod, n, thr_, sec = nil, nil, nil, nil
  if raw and sc and QUOTA_LEN[code] then bod, n, thr_, sec = quota_value(raw) end
  local bn = tonumber(ARGV[5])
  if bod == nil or bn == nil or bod ~= bn - math.floor(bn * QUOTA_LEN[code] / DAY_MS) * (DAY_MS / QUOTA_LEN[code]) then
    return fail('NOT_FOUND', NONE)
  end
  local exp = (bn + 1) * QUOTA_LEN[code] + QUOTA_GRACE_MS
  if exp <= now then return fail('NOT_FOUND', NONE) end
  -- n and thr back to 0, the bucket and the last count's time kept
  -- (quota_value); an '@' field stays. The limit and policy: the '@'
  -- field's, else the current policies' (QUOTA_MEMO.meta).
  redis.call('HSET', KEYS[2], ARGV[4], string.format('%x', sec * 2048 + bod))
  local raw_meta = redis.call('HGET', KEYS[2], ARGV[4] .. '@')
  local lmt, pol = quota_meta(raw_meta)
  if not raw_meta then lmt, pol = QUOTA_MEMO.meta(KEYS[1], sc, counted, code, now, {}) end
  local day = math.floor(bn * QUOTA_LEN[code] / DAY_MS)
  local at = ms(day * DAY_MS + sec * 1000)
  n = ms(n)
  local k, rc = counted, ''
  local risk = string.match(counted, '^__risk__:(.*)$')
  if risk then k, rc = '__risk__', risk end
  v = {n, lmt, pol, at, ms(exp), sc, k, rc, POLICY_WNAME[code], quota_wkey(code, bn)}
else
  v = redis.call('HMGET', KEYS[2], 'n', 'lim', 'pol', 'at', 'exp', 'sc', 'k', 'rc', 'w', 'wk', 'ttl')
  if not v[1] then return fail('NOT_FOUND', NONE) end
  redis.call('HSET', KEYS[2], 'n', '0')
  redis.call('HDEL', KEYS[2], 'thr')
  local ttl = tonumber(v[11] or '')
  if v[9] == 'per_run' and ttl and ttl > 0 then
    v[5] = ms(now + ttl)
    redis.call('HSET', KEYS[2], 'exp', v[5])
    redis.call('PEXPIREAT', KEYS[2], v[5])
    redis.call('ZADD', KEYS[3], v[5], KEYS[2])
  end
end
local prev, exp = v[1], v[5] or '0'
local ctx = jdecode(ARGV[1]) or {}
local emit = event_emitter(KEYS[4], ARGV[1], now)
emit('quota.counter_reset', 'policy', v[6] or '', {
  tenant_id = ARGV[3], scope = v[6], action_kind = v[7], risk_class = (v[8] ~= '' and v[8]) or nil, window = v[9],
  window_key = v[10], previous_used = tonumber(prev), limit = tonumber(v[2] or ''), actor_id = ctx.key_id ~= '' and ctx.key_id or ctx.actor,
  reason = ARGV[2], policy_id = v[3],
}, CORR.quota(ARGV[3], v[6] or '', (v[8] ~= '' and v[8]) or v[7] or '', v[9] or '', v[10] or ''))
audit_ok_at(KEYS[5], ARGV[1])
return ok({state = {v[6] or '', v[7] or '', v[8] or '', v[9] or '', v[10] or '', '0', v[2] or '0', v[3] or '', exp, v[4] or '0'},
  previous = prev})
