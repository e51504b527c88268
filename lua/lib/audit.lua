-- lib/audit.lua: the audit trail (docs/operations.md#audit-trail). Included
-- with "-- include: lib/audit.lua" by every mutating admin and ops script and
-- by the ledger scripts an admin may call on a tenant's behalf.
--
-- An entry is one stream entry (XADD *, so its id is Redis TIME and entries
-- are in time order; a reader resumes after the last id it saw). Nothing but
-- XADD and the MINID trim of the retention ever touches an audit stream: no
-- script or API alters or deletes an entry.
--
-- The entry's content arrives inside the event context ARGV
-- (internal/eventctx.Arg): c.audit = {t, ret, k, ip, ua, op, rt, rid, st, ec,
-- md} plus c.base (the log id), c.request_id and c.trace_id. A call that is
-- not audited has no c.audit, and audit_ok does nothing.
-- Library functions take keys and values as parameters (no KEYS/ARGV reads).

-- audit_append appends the entry of the decoded event context c to key.
-- Empty fields are left out (bytes per entry: BENCHMARKS.md).
local function audit_append(key, c, now)
  local a = c.audit
  local keep = tonumber(a.ret) or 0
  local args = {'XADD', key, 'MINID', '~', string.format('%.0f', math.max(0, now - keep)), '*',
    'id', 'aud_' .. tostring(c.base), 't', tostring(a.t), 'op', tostring(a.op), 'st', tostring(a.st or 0)}
  local function add(field, v)
    if type(v) == 'string' and v ~= '' then
      args[#args + 1] = field
      args[#args + 1] = v
    end
  end
  add('k', a.k)
  add('ip', a.ip)
  add('ua', a.ua)
  add('rt', a.rt)
  add('rid', a.rid)
  add('req', c.request_id)
  add('tr', c.trace_id)
  add('ec', a.ec)
  if type(a.md) == 'table' and next(a.md) ~= nil then add('md', cjson.encode(a.md)) end
  return redis.call(unpack(args))
end

-- audit_ok appends the success entry of an audited call to the audit stream
-- of the tenant whose key prefix ("cy:{t:T}:") is prefix, in the same script
-- run as the change it records. ectx_json is the script's event-context ARGV.
local function audit_ok(prefix, ectx_json)
  local c = cjson.decode(ectx_json)
  if type(c.audit) ~= 'table' then return end
  audit_append(prefix .. 'audit', c, now_ms())
end

-- audit_ok_at is audit_ok for scripts given the audit stream key itself;
-- rid, when given, names a resource the script created (its id is not in
-- the request).
local function audit_ok_at(audit_key, ectx_json, rid)
  local c = cjson.decode(ectx_json)
  if type(c.audit) ~= 'table' then return end
  if rid and (c.audit.rid == nil or c.audit.rid == '') then c.audit.rid = rid end
  audit_append(audit_key, c, now_ms())
end

-- audit_ok_ev is audit_ok for scripts that know the tenant's event stream
-- key ("cy:{t:T}:events") rather than its prefix.
local function audit_ok_ev(events_key, ectx_json)
  audit_ok(string.sub(events_key, 1, -7), ectx_json)
end
