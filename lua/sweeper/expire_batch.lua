#!lua flags=allow-oom
-- sweeper/expire_batch: expire up to N due reservations of one tenant, in one
-- atomic call that stops early once it has run for budget_us (Redis TIME), so
-- no call holds Redis (and every other tenant's reserve) for long
-- (docs/protocol.md#expiry, docs/design.md#the-sweeper, internal/sweeper/doc.go).
-- include: lib/refund.lua lib/keys.lua lib/record_layout.lua lib/paging.lua lib/civil.lua
--
-- KEYS: 1 tenant_prefix   "cy:{t:<tenant>}:"; reservation and budget keys are
--                         derived from it (prefix .. "r:" .. id, prefix .. "b:" ..
--                         scope .. ":" .. unit), so every key stays in the
--                         tenant's Cluster slot; so is the quarantine index
--                         prefix .. "r:quarantine" (zset: id -> quarantined_at)
--       2 deadlines       cy:{t:<tenant>}:r:deadline (zset: ACTIVE id -> expires_at + grace_ms)
--       3 event_stream    cy:{t:<tenant>}:events
--       4 sweep_tally     cy:{t:<tenant>}:sweep:<drain id> (hash: outcome -> count,
--                         due_before): the running totals of one drain of the
--                         tenant; each call that handled entries adds its counts
--                         (HINCRBY) and refreshes a 10-minute TTL, and every call
--                         returns the totals, so the outcome of a call whose reply
--                         the client lost (a timeout after the script ran) is
--                         reported by the next call of the same drain
-- ARGV: 1 batch_size      N, 1..10000
--       2 event_ctx       event context JSON (internal/eventctx.Arg: base,
--                         retention_ms, actor, trace_id, ...)
--       3 tail            'tail' also returns the stream's newest id (the feed's
--                         reconciliation, internal/events/doc.go); anything else
--                         (or absent) is ignored
--       4 must_exist      'tenant' refuses TENANT_NOT_FOUND when the tenant has
--                         no record (an operator's SweepTenant; the background
--                         sweep walks the registry and skips the check)
--       5 archive         '1' when an archive is configured: an expired record
--                         gets no TTL but joins the tenant's archive queue
--                         (key_archive_queue), the archiver setting its TTL once
--                         archived.
--       6 budget_us       1..1000000: once this many microseconds of Redis TIME
--                         have passed since the call began, no further candidate
--                         is taken (the first always is), and due > 0 tells the
--                         caller to call again. Any further ARGV is ignored:
--                         the only clock is Redis TIME; `now` (every deadline
--                         decision and expired_at) is read once at the start,
--                         later reads only measure the time budget.
--
-- Result ok({now, due_before, due, expired, skipped, in_grace, not_found, quarantined,
--            q = [{id, reason}], tail, took_us,
--            total = {expired, skipped, in_grace, not_found, quarantined, due_before}})
--   due_before / due: index entries due (score < now) before and after this call;
--   due > 0 means the caller should call again at once. q lists the quarantined
--   ids (at most N; it encodes as {} when empty). tail: the newest id of the
--   event stream ('' when empty or not asked for). took_us: Redis TIME spent by
--   this call up to its last candidate. total: the sweep_tally after this call
--   (this call's counts included; due_before of the drain's first counted call,
--   or this call's when nothing was counted yet).
--
-- Per candidate id (selected by ZRANGEBYSCORE -inf (now LIMIT 0 k, in pages of
-- k <= 128 up to N in all, until the time budget is spent):
--   record missing                       -> ZREM                          NOT_FOUND
--   state COMMITTED|RELEASED|EXPIRED     -> ZREM, ledger untouched        SKIP
--   now <= expires_at + grace_ms         -> re-score to that deadline     IN_GRACE (record untouched)
--   corrupt record or refund impossible  -> HSET quarantined_at/_reason, ZREM, ZADD to the
--                                           quarantine index, ledger and state
--                                           untouched                     QUARANTINED
--   otherwise, on every budgeted scope: reserved -= estimate, remaining += estimate;
--   state=EXPIRED, expired_at=now, ZREM, PEXPIRE 30 d (or XADD to the archive
--   queue when ARGV[5] is '1'), one reservation.expired
--   event                                                                 EXPIRED
-- Every refund is validated and computed with int64.lua before its first write,
-- so a reservation is either fully expired or not touched at all.

local TERMINAL_RETENTION_MS = 2592000000

local prefix, deadlines, stream = KEYS[1], KEYS[2], KEYS[3]
local quarantine_index = key_index(prefix, 'quarantine')
local archive, archive_queue = ARGV[5] == '1', key_archive_queue(prefix)
local n, refused = paging.size(ARGV[1], 10000, 'batch size')
if not n then return refused end
-- The time budget and the drain's tally (KEYS[4]), in one table: the embedded
-- store's Lua (gopher-lua) has few registers for top-level locals.
local TB = {us = tonumber(ARGV[6]), tally = KEYS[4], TTL_MS = 600000}
if not TB.us or TB.us < 1 or TB.us > 1000000 or TB.us ~= math.floor(TB.us) then
  return fail('INVALID_REQUEST', 'time budget must be 1..1000000 microseconds')
end
if type(TB.tally) ~= 'string' or #TB.tally <= #KEYS[1] + 6 or string.sub(TB.tally, 1, #KEYS[1] + 6) ~= KEYS[1] .. 'sweep:' then
  return fail('INVALID_REQUEST', 'sweep tally key must be the tenant prefix .. sweep:<drain id>')
end
-- clock_us is Redis TIME in microseconds (< 2^53): the budget's clock only.
function TB.clock_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local okc, ectx = pcall(cjson.decode, ARGV[2] or '')
if not okc or type(ectx) ~= 'table' or type(ectx.base) ~= 'string' or #ectx.base < 12 then
  return fail('INVALID_REQUEST', 'event context is malformed')
end
local retention_ms = tonumber(ectx.retention_ms)
if not retention_ms or retention_ms <= 0 then
  return fail('INVALID_REQUEST', 'event retention must be positive')
end
if ARGV[4] == 'tenant' then
  local missing = missing_tenant(prefix)
  if missing then return missing end
end

local now = now_ms()
TB.start = TB.clock_us()
TB.took = 0

local function str(x) return string.format('%.0f', x) end

-- is_ms: a non-negative integer time/duration field (< 2^53, so tonumber is exact).
local function is_ms(v)
  return type(v) == 'string' and #v <= 15 and string.find(v, '^%d+$') ~= nil
end

-- iso8601 formats epoch milliseconds as UTC "YYYY-MM-DDTHH:MM:SS.mmmZ".
local function iso8601(ms)
  local secs = math.floor(ms / 1000)
  local milli = ms - secs * 1000
  local days = math.floor(secs / 86400)
  local sod = secs - days * 86400
  local y, m, d = civil_date(days)
  return string.format('%04d-%02d-%02dT%02d:%02d:%02d.%03dZ', y, m, d,
    math.floor(sod / 3600), math.floor((sod % 3600) / 60), sod % 60, milli)
end

local counts = {expired = 0, skipped = 0, in_grace = 0, not_found = 0, quarantined = 0}
local quarantined = {}
local events = 0

local function quarantine(rkey, id, reason, flag)
  if flag then
    redis.call('HSET', rkey, 'quarantined_at', str(now), 'quarantine_reason', reason)
    -- Indexed so OpsService.ListQuarantined and the audit find it without a scan.
    redis.call('ZADD', quarantine_index, str(now), id)
  end
  redis.call('ZREM', deadlines, id)
  counts.quarantined = counts.quarantined + 1
  quarantined[#quarantined + 1] = {id = id, reason = reason}
end

-- plan validates an ACTIVE, due record and computes the new reserved/remaining
-- of every budgeted scope without writing anything.
-- Returns nil, reason when the reservation must be quarantined.
local function plan(r)
  if r.estimate == nil or r.estimate == '' then return nil, 'INVALID_ESTIMATE' end
  local est = i64_norm(r.estimate)
  if est == nil or i64_cmp(est, '0') < 0 then return nil, 'INVALID_ESTIMATE' end
  if type(r.unit) ~= 'string' or string.find(r.unit, '^[A-Z_]+$') == nil then
    return nil, 'INVALID_ESTIMATE'
  end
  local scopes, bad = budgeted_scopes(r.budgeted, r.scope_path)
  if not scopes then return nil, bad end
  local steps = {}
  for i = 1, #scopes do
    local b, problem = refund_read(key_budget(prefix, scopes[i], r.unit))
    if b == nil then return nil, (problem == 'MISSING') and 'MISSING_BUDGET' or 'CORRUPT_BUDGET' end
    -- A budget cannot hold less than the reservations that reserved against it
    -- (docs/protocol.md#tenants-and-api-keys): RESERVED_UNDERFLOW quarantines.
    local done
    done, problem = refund_step(b, est, true)
    if not done then return nil, problem end
    steps[#steps + 1] = b
  end
  return {estimate = est, steps = steps}
end

local function expire(rkey, id, r, p)
  refund_apply(p.steps)
  quota_refund(r.qrun)
  redis.call('HSET', rkey, 'state', 'EXPIRED', 'expired_at', str(now))
  redis.call('ZREM', deadlines, id)
  if archive then
    redis.call('XADD', archive_queue, '*', 'id', id)
  else
    redis.call('PEXPIRE', rkey, TERMINAL_RETENTION_MS)
  end
  local expires_at = tonumber(r.expires_at)
  local data = {
    reservation_id = id, scope = r.scope_path or '', unit = r.unit,
    estimated_amount = p.estimate, expired_at = iso8601(now), expires_at_ms = expires_at,
    extensions_used = tonumber(r.ext_count or '') or 0,
  }
  if is_ms(r.created_at) then
    local created = tonumber(r.created_at)
    data.created_at = iso8601(created)
    data.ttl_ms = expires_at - created
  end
  events = events + 1
  -- The tenant, 12 random hex of the per-call base and a 4-hex counter
  -- (event_id): unique within the call for any batch size allowed above.
  emit_event(stream, retention_ms, now, {
    id = event_id(stream, ectx.base, events),
    type = 'reservation.expired', category = 'reservation', scope = r.scope_path or '',
    actor = 'system', key_id = '', request_id = ectx.request_id or '', trace_id = ectx.trace_id or '',
    source = 'cyclesd',
  }, data)
  counts.expired = counts.expired + 1
end

local due_clause = '(' .. str(now)
local due_before = redis.call('ZCOUNT', deadlines, '-inf', due_clause)
-- handle decides and applies the outcome of one due candidate. Every outcome
-- takes the entry out of the due range (ZREM, or IN_GRACE's re-score to a
-- deadline >= now), so the next page starts again at the head of the index.
function TB.handle(id)
  local rkey = key_reservation(prefix, id)
  local reply = redis.pcall('HGETALL', rkey)
  if type(reply) == 'table' and reply.err then
    -- Not a hash: nothing to flag, but it must not block the index.
    quarantine(rkey, id, 'WRONG_TYPE', false)
  elseif #reply == 0 then
    redis.call('ZREM', deadlines, id)
    counts.not_found = counts.not_found + 1
  else
    local r = hmap(reply)
    local st = r.state
    if st == 'COMMITTED' or st == 'RELEASED' or st == 'EXPIRED' then
      redis.call('ZREM', deadlines, id)
      counts.skipped = counts.skipped + 1
    elseif st ~= 'ACTIVE' then
      quarantine(rkey, id, 'INVALID_STATE', true)
    elseif not is_ms(r.expires_at) or not is_ms(r.grace_ms) then
      quarantine(rkey, id, 'INVALID_EXPIRY', true)
    else
      local deadline = tonumber(r.expires_at) + tonumber(r.grace_ms)
      if now <= deadline then
        -- The record decides, not the index score: still in grace. Re-score
        -- so the entry stops occupying the head of every batch.
        redis.call('ZADD', deadlines, str(deadline), id)
        counts.in_grace = counts.in_grace + 1
      else
        local p, reason = plan(r)
        if p == nil then
          quarantine(rkey, id, reason, true)
        else
          expire(rkey, id, r, p)
        end
      end
    end
  end
end

-- Candidates are read a page at a time, so a call that stops at its time
-- budget has not fetched (up to N) ids it never handles.
TB.PAGE, TB.taken = 128, 0
while due_before > 0 and TB.taken < n and not TB.stop do
  local page = redis.call('ZRANGEBYSCORE', deadlines, '-inf', due_clause, 'LIMIT', 0, math.min(TB.PAGE, n - TB.taken))
  for _, id in ipairs(page) do
    if TB.taken > 0 then
      TB.took = TB.clock_us() - TB.start
      if TB.took >= TB.us then TB.stop = true; break end
    end
    TB.handle(id)
    TB.taken = TB.taken + 1
  end
  if #page < TB.PAGE then break end
end

local due = 0
if due_before > 0 then
  due = redis.call('ZCOUNT', deadlines, '-inf', due_clause)
  TB.took = TB.clock_us() - TB.start
end

-- The drain's running totals (KEYS[4]): written only by a call that handled
-- entries, so an idle tenant gets no key.
local total = {expired = 0, skipped = 0, in_grace = 0, not_found = 0, quarantined = 0, due_before = due_before}
if counts.expired + counts.skipped + counts.in_grace + counts.not_found + counts.quarantined > 0 then
  for field, v in pairs(counts) do
    if v > 0 then redis.call('HINCRBY', TB.tally, field, v) end
  end
  redis.call('HSETNX', TB.tally, 'due_before', due_before)
  redis.call('PEXPIRE', TB.tally, TB.TTL_MS)
end
local held = redis.call('HGETALL', TB.tally)
for j = 1, #held, 2 do
  if total[held[j]] ~= nil then total[held[j]] = tonumber(held[j + 1]) end
end

local tail = ''
if ARGV[3] == 'tail' then
  local newest = redis.call('XREVRANGE', stream, '+', '-', 'COUNT', 1)
  if #newest > 0 then tail = newest[1][1] end
end

return ok({
  now = now, due_before = due_before, due = due, tail = tail,
  expired = counts.expired, skipped = counts.skipped, in_grace = counts.in_grace,
  not_found = counts.not_found, quarantined = counts.quarantined, q = quarantined,
  took_us = TB.took, total = total,
})
