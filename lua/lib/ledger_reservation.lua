-- lib/ledger_reservation.lua: reading and validating a reservation record.
-- Included by ledger scripts with "-- include: lib/ledger_reservation.lua" (see internal/script).
-- include: lib/ledger_util.lua lib/ledger_tenant.lua lib/ledger_budget.lua lib/keys.lua lib/record_layout.lua

-- archived_fields reads the field/value pairs of an archived record from
-- ARGV[from..] (a settled reservation past the hot window, read from the
-- PostgreSQL archive by internal/archiver): nil when there are none or they
-- are not pairs (at most 128). A script answering from them only replays or
-- refuses: the reservation is settled, nothing is written.
local function archived_fields(from)
  local n = #ARGV - from + 1
  if n <= 0 or n % 2 ~= 0 or n > 256 then return nil end
  local f = {}
  for i = from, #ARGV, 2 do f[ARGV[i]] = ARGV[i + 1] end
  if not f.state then return nil end
  return f
end

-- load_reservation checks the settlement preconditions shared by commit,
-- release and extend after the replay check: record, tenant guard (CLOSED
-- only; settlement of a SUSPENDED tenant proceeds), state.
-- Of the tenant record a settlement needs only the status and the compiled
-- commit rate limits (prc): two fields, not tenant_conf's eight (the TTL,
-- extension and policy defaults are the reserve's). No record is a
-- runtime-only deployment (no guard), as in tenant_conf; a record without a
-- valid status fails closed.
-- Returns the record or nil, code, message.
local function load_reservation(r, tenant_key)
  local t = redis.call('HMGET', tenant_key, 'status', 'prc')
  local status = t[1]
  if status then
    if not TENANT_STATUSES[status] then return nil, 'INTERNAL_ERROR', 'tenant record has an invalid status' end
    if status == 'CLOSED' then return nil, 'TENANT_CLOSED', 'tenant is closed' end
  elseif t[2] or redis.call('EXISTS', tenant_key) == 1 then
    return nil, 'INTERNAL_ERROR', 'tenant record has an invalid status'
  end
  if r.state == 'EXPIRED' then return nil, 'RESERVATION_EXPIRED', 'reservation expired' end
  if r.state == 'COMMITTED' or r.state == 'RELEASED' then
    return nil, 'RESERVATION_FINALIZED', 'reservation is already ' .. r.state
  end
  if r.state ~= 'ACTIVE' then return nil, 'INTERNAL_ERROR', 'reservation has an invalid state' end
  -- The tenant's compiled commit rate limits (lib/policy_rate.lua; '' none).
  r.prc = t[2] or ''
  r.n_expires = small_int(r.expires_at)
  r.n_grace = small_int(r.grace_ms)
  r.E = i64_norm(r.estimate)
  r.scopes = unpack_budgeted(r.budgeted, r.scope_path)
  if r.n_expires == nil or r.n_grace == nil or r.E == nil or r.scopes == nil or r.unit == nil then
    return nil, 'INTERNAL_ERROR', 'reservation record is corrupt'
  end
  return r
end

-- reservation_budgets loads the budgets of the reservation's snapshot of
-- budgeted scopes. A budget hash that no longer exists is skipped (nothing
-- left to settle against); a corrupt one fails closed.
local function reservation_budgets(prefix, r)
  local bs, scopes = {nil, nil, nil}, r.scopes -- presized for three scopes (no rehash while filled)
  for i = 1, #scopes do
    local path = scopes[i]
    local b, err = load_budget(key_budget(prefix, path, r.unit), path, true)
    if err then return nil, err end
    if b then bs[#bs + 1] = b end
  end
  return bs
end

-- finalize marks a record terminal: out of the deadline index. Without an
-- archive it is kept for the terminal retention (replays of commit/release
-- keys live on the record). With one (archive = '1', the scripts' archive
-- ARGV) it gets no TTL here: its id joins the tenant's archive queue, and the
-- archiver (internal/archiver) sets the hot-window TTL only once PostgreSQL
-- holds the record, so nothing leaves Redis unarchived.
local function finalize(prefix, key, deadline_key, rid, archive)
  redis.call('ZREM', deadline_key, rid)
  if archive == '1' then
    redis.call('XADD', key_archive_queue(prefix), '*', 'id', rid)
  else
    redis.call('PEXPIRE', key, RETENTION_MS)
  end
end
