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

-- Budget hash fields read for a balance snapshot, in this order.
local BALANCE_FIELDS = {'remaining', 'reserved', 'spent', 'allocated', 'debt', 'overdraft_limit', 'is_over_limit'}

-- balance_of returns the wire snapshot of one budget hash (amounts as strings).
local function balance_of(key, scope_path)
  local v = redis.call('HMGET', key, unpack(BALANCE_FIELDS))
  return {
    scope_path = scope_path,
    remaining = v[1] or '0', reserved = v[2] or '0', spent = v[3] or '0',
    allocated = v[4] or '0', debt = v[5] or '0', overdraft_limit = v[6] or '0',
    is_over_limit = (v[7] == 'true'),
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
