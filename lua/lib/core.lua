-- core.lua: helpers shared by every script (prepended after int64.lua).
--
-- Result convention: a script returns one of
--   {'OK', <json>}            ok(): success (plus <stream>, <last event id> when
--                             the run appended events);
--   {'OK', FLAT_V, <stream>, <last event id>, <field>...}
--                             okf(): a flat success (the ledger mutations);
--   {'<CODE>', <json>}        fail(): a refusal, json = {msg=..., d={detail=...}}.
-- The executor (internal/script) turns refusals into *apierr.Error. A refusal is
-- always returned before the first write, so a refused request changes nothing.
--
-- Time: now_ms() reads Redis TIME; no script ever trusts a client clock.

local function now_ms()
  local t = redis.call('TIME')
  -- Arithmetic converts each string once (tonumber() would parse it twice).
  return t[1] * 1000 + math.floor(t[2] / 1000)
end

-- emitted_stream / emitted_id remember the last event this script run
-- appended (emit_event). ok() hands them to the executor as two extra result
-- elements, so cyclesd can announce "tenant T has events up to id X" to the
-- all-tenant feed (internal/events/doc.go) without reading the stream again.
local emitted_stream, emitted_id = nil, nil

local function ok(res)
  if emitted_id then
    return {'OK', cjson.encode(res), emitted_stream, emitted_id}
  end
  return {'OK', cjson.encode(res)}
end

-- Flat replies (the ledger mutations; docs/design.md#script-replies): no JSON
-- to build here nor to parse in cyclesd. A reply is the array
--   {'OK', FLAT_V, <stream or ''>, <last event id or ''>, <field>, ...}
-- built by the script with the two event slots empty; okf fills them.
local FLAT_V = 'f1'

local function okf(out)
  if emitted_id then out[3] = emitted_stream; out[4] = emitted_id end
  return out
end

local function fail(code, msg, details)
  return {code, cjson.encode({msg = msg or code, d = details or {}})}
end

-- hmap turns an HGETALL reply into a table (empty table when the key is absent).
local function hmap(reply)
  local m = {}
  for i = 1, #reply, 2 do m[reply[i]] = reply[i + 1] end
  return m
end

local function hgetall(key)
  return hmap(redis.call('HGETALL', key))
end

-- BAL: a budget's balance, kept whole in ONE field of the budget hash,
-- `bal` (docs/design.md#budgets):
--   "<status>:<remaining>:<reserved>:<spent>:<allocated>:<debt>:<overdraft_limit>:<over>"
-- status ACTIVE|FROZEN|CLOSED, the six amounts canonical int64 decimal
-- strings, over 1|0 (is_over_limit). Every script that changes any of them
-- rewrites the field whole (one HSET); a hot-path read is one HGET and one
-- pattern match (an 8-field HMGET and six checks cost Redis ~4x that). The
-- library's names live in this one table (gopher-lua's local limit).
local BAL = {
  STATUS = {ACTIVE = true, FROZEN = true, CLOSED = true},
  PATTERN = '^(%u+):(%-?%d+):(%-?%d+):(%-?%d+):(%-?%d+):(%-?%d+):(%-?%d+):([01])$',
}

-- BAL.wide is true when an amount of 16+ characters is a canonical int64
-- (the pattern and BAL.split's scans settle every shorter one).
function BAL.wide(v)
  return #v < 16 or i64_norm(v) == v
end

-- BAL.split returns status, remaining, reserved, spent, allocated, debt,
-- overdraft_limit (canonical int64 strings) and over (boolean) of a stored
-- balance; nil when v is absent, not the layout, has an unknown status or any
-- amount that is not canonical (a leading zero, "-0", out of int64): callers
-- fail closed. Canonical means: no amount starts with "0" followed by a digit
-- (":0%d"), none with "-0", and those of 16+ characters round-trip i64_norm.
function BAL.split(v)
  if not v then return nil end
  local st, rem, res, spent, alloc, debt, lim, over = string.match(v, BAL.PATTERN)
  if not st or not BAL.STATUS[st] or string.find(v, '-0', 1, true) or string.find(v, ':0%d') then return nil end
  if (#rem > 15 or #res > 15 or #spent > 15 or #alloc > 15 or #debt > 15 or #lim > 15) and not (BAL.wide(rem)
      and BAL.wide(res) and BAL.wide(spent) and BAL.wide(alloc) and BAL.wide(debt) and BAL.wide(lim)) then
    return nil
  end
  return st, rem, res, spent, alloc, debt, lim, over == '1'
end

-- BAL.pack is the stored form of a balance (canonical strings in, as
-- int64.lua and the callers' fast paths produce them).
function BAL.pack(st, rem, res, spent, alloc, debt, lim, over)
  return st .. ':' .. rem .. ':' .. res .. ':' .. spent .. ':' .. alloc .. ':' .. debt .. ':' .. lim
    .. (over and ':1' or ':0')
end

-- BAL.parts splits a stored balance into its eight raw parts without judging
-- them, for the operator's audit and repair, which name each bad amount:
-- {status, remaining, reserved, spent, allocated, debt, overdraft_limit,
-- over} as stored, or nil when v is absent or not eight ':'-separated parts.
function BAL.parts(v)
  if type(v) ~= 'string' then return nil end
  local p = {string.match(v, '^([^:]*):([^:]*):([^:]*):([^:]*):([^:]*):([^:]*):([^:]*):([^:]*)$')}
  if p[1] == nil then return nil end
  return p
end

-- BAL.amounts is the five ledger amounts of a stored balance as stored
-- ({allocated, remaining, reserved, spent, debt}), or nil (BAL.parts).
function BAL.amounts(v)
  local p = BAL.parts(v)
  if p == nil then return nil end
  return {allocated = p[5], remaining = p[2], reserved = p[3], spent = p[4], debt = p[6]}
end

-- balance_of returns the wire snapshot of one budget hash (amounts as
-- strings): zeros when it holds no balance, nil when the balance is corrupt.
local function balance_of(key, scope_path)
  local v = redis.call('HGET', key, 'bal')
  if not v then
    return {scope_path = scope_path, remaining = '0', reserved = '0', spent = '0', allocated = '0', debt = '0',
      overdraft_limit = '0', is_over_limit = false}
  end
  local st, rem, res, spent, alloc, debt, lim, over = BAL.split(v)
  if not st then return nil end
  return {
    scope_path = scope_path, remaining = rem, reserved = res, spent = spent,
    allocated = alloc, debt = debt, overdraft_limit = lim, is_over_limit = over,
  }
end

-- emit_event appends one event to a tenant's stream (the transactional outbox),
-- trimming entries older than retention_ms by stream ID (approximate, so the
-- trim is bounded per call). Amounts inside data are decimal strings.
-- ev = {id, type, category, scope, actor, key_id, request_id, trace_id, source,
-- correlation_id}. The correlation id is the entry's last field, 'corr',
-- written only when set: an event without one keeps the layout events always
-- had (internal/events reads both).
local function emit_event(stream, retention_ms, now, ev, data)
  local minid = tostring(math.max(0, now - retention_ms))
  emitted_stream = stream
  local corr = ev.correlation_id
  if type(corr) == 'string' and corr ~= '' then
    emitted_id = redis.call('XADD', stream, 'MINID', '~', minid, '*',
      'id', ev.id, 'type', ev.type, 'cat', ev.category, 'ts', tostring(now),
      'scope', ev.scope or '', 'actor', ev.actor or 'system', 'key_id', ev.key_id or '',
      'req', ev.request_id or '', 'trace', ev.trace_id or '', 'src', ev.source or 'cyclesd',
      'data', cjson.encode(data or {}), 'corr', corr)
    return
  end
  -- Without one (most events, every expiry): the same call as always, no
  -- table built.
  emitted_id = redis.call('XADD', stream, 'MINID', '~', minid, '*',
    'id', ev.id, 'type', ev.type, 'cat', ev.category, 'ts', tostring(now),
    'scope', ev.scope or '', 'actor', ev.actor or 'system', 'key_id', ev.key_id or '',
    'req', ev.request_id or '', 'trace', ev.trace_id or '', 'src', ev.source or 'cyclesd',
    'data', cjson.encode(data or {}))
end

-- event_id is the id of the n-th event of a script run on stream (the tenant's
-- "cy:{t:<tenant>}:events"): 'evt_' .. tenant .. '_' .. 12 hex of the run's
-- base .. <4 hex counter>. The tenant in the id lets GET
-- /v1/admin/events/{id} find the event's log without a tenant_id and without
-- any global index (internal/events.TenantOfEventID).
local function event_id(stream, base, n)
  return 'evt_' .. string.sub(stream, 7, -9) .. '_' .. string.sub(base, 1, 12) .. string.format('%04x', n)
end

-- event_emitter returns emit(type, category, scope, data[, correlation_id])
-- for one script run, and the decoded event context. ectx_json is the ARGV
-- built by internal/eventctx.Arg:
--   {base = 14 hex chars, retention_ms = n, actor = 'api_key'|'admin'|'system',
--    key_id = '', request_id = '', trace_id = '', correlation_id = '' or absent}
-- An event's correlation id is the one emit is given, else the context's
-- (a bulk action's rows), else none.
-- Event ids (event_id) are unique for up to 65,536 events per run.
local function event_emitter(stream, ectx_json, now)
  local c = cjson.decode(ectx_json)
  local n = 0
  return function(ev_type, category, scope, data, corr)
    n = n + 1
    emit_event(stream, tonumber(c.retention_ms), now, {
      id = event_id(stream, c.base, n), type = ev_type, category = category,
      scope = scope, actor = c.actor, key_id = c.key_id, request_id = c.request_id,
      trace_id = c.trace_id, source = 'cyclesd', correlation_id = corr or c.correlation_id,
    }, data)
  end, c
end
