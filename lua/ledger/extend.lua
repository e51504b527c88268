-- ledger/extend: move an ACTIVE reservation's expiry forward (PROTOCOL.md §b.5).
-- New expires_at = current expires_at + extend_by_ms; accepted only while
-- now <= expires_at (no grace) and ext_count < max_ext. No clamp, no events.
--
-- KEYS: 1 tenant prefix   2 tenant record   3 reservation hash   4 deadline index
--       5 expires index    6 idempotency record (endpoint "extend:<reservation id>")
-- ARGV: 1 reservation id   2 extend_by_ms   3 idempotency key   4 payload hash
--       5 metadata (JSON or '')
--       Extra ARGV are ignored (time always comes from Redis TIME).
-- Result: ok({replay = bool, resp = <snapshot JSON>, rem_ttl = '<ms>'})
--   snapshot: {status = 'ACTIVE', unit, expires_at_ms, balances, extension_count}
-- Refusals: INVALID_REQUEST, NOT_FOUND, IDEMPOTENCY_MISMATCH, TENANT_CLOSED,
--   RESERVATION_EXPIRED, RESERVATION_FINALIZED, MAX_EXTENSIONS_EXCEEDED, INTERNAL_ERROR.

-- <shared:util>
local DAY_MS = 86400000
local RETENTION_MS = 30 * DAY_MS
local POLICIES = {REJECT = true, ALLOW_IF_AVAILABLE = true, ALLOW_WITH_OVERDRAFT = true}

-- jdecode decodes a JSON object/array; nil when absent or malformed (cjson
-- raises on bad input in Redis but returns nil, err on the embedded store).
local function jdecode(s)
  if s == nil or s == false or s == '' then return nil end
  local good, v = pcall(cjson.decode, s)
  if good and type(v) == 'table' then return v end
  return nil
end

-- ms formats a time or duration (plain Lua number, < 2^53) as a decimal string.
local function ms(n) return string.format('%.0f', n) end

-- small_int parses a non-negative integer field that is not money (times,
-- durations, counters); nil when malformed.
local function small_int(s)
  if s == nil or s == false or not string.match(s, '^%d+$') or #s > 15 then return nil end
  return tonumber(s)
end
-- </shared:util>
-- <shared:tenant>
local TENANT_STATUSES = {ACTIVE = true, SUSPENDED = true, CLOSED = true}

-- tenant_conf reads the tenant record. No record = runtime-only deployment:
-- no guard, protocol defaults. A malformed record fails closed.
-- Returns conf, or nil and a message (INTERNAL_ERROR).
local function tenant_conf(key)
  local t = hgetall(key)
  local conf = {present = false, status = 'ACTIVE', default_ttl = 60000, max_ttl = 0, max_ext = 10, default_policy = ''}
  if next(t) == nil then return conf end
  conf.present = true
  conf.status = t.status
  if not TENANT_STATUSES[t.status or ''] then return nil, 'tenant record has an invalid status' end
  if t.default_ttl_ms and t.default_ttl_ms ~= '' then
    conf.default_ttl = small_int(t.default_ttl_ms)
    if conf.default_ttl == nil then return nil, 'tenant record has an invalid default_ttl_ms' end
    if conf.default_ttl == 0 then conf.default_ttl = 60000 end
  end
  if t.max_ttl_ms and t.max_ttl_ms ~= '' then
    conf.max_ttl = small_int(t.max_ttl_ms)
    if conf.max_ttl == nil then return nil, 'tenant record has an invalid max_ttl_ms' end
  end
  if t.max_extensions and t.max_extensions ~= '' then
    conf.max_ext = small_int(t.max_extensions)
    if conf.max_ext == nil then return nil, 'tenant record has an invalid max_extensions' end
  end
  conf.default_policy = t.default_policy or ''
  return conf
end

-- resolve_policy: request value, else the tenant default, else
-- ALLOW_IF_AVAILABLE. An invalid tenant default is INVALID_REQUEST (REF).
local function resolve_policy(requested, conf)
  if requested ~= '' then
    if not POLICIES[requested] then return nil end
    return requested
  end
  if conf.default_policy == '' then return 'ALLOW_IF_AVAILABLE' end
  if not POLICIES[conf.default_policy] then return nil end
  return conf.default_policy
end
-- </shared:tenant>
-- <shared:budget>
local BUDGET_STATUSES = {ACTIVE = true, FROZEN = true, CLOSED = true}
local BUDGET_READ = {'remaining', 'reserved', 'spent', 'allocated', 'debt', 'overdraft_limit', 'is_over_limit', 'status', 'caps'}
local BUDGET_AMOUNTS = {'rem', 'res', 'spent', 'alloc', 'debt', 'lim'}

-- load_budget reads one budget hash into canonical int64 strings. Returns nil
-- when the key holds no budget, or nil and a message when it is corrupt
-- (callers fail closed with INTERNAL_ERROR before any write).
local function load_budget(key, path)
  local v = redis.call('HMGET', key, unpack(BUDGET_READ))
  local any = false
  for i = 1, #BUDGET_READ do
    if v[i] then any = true end
  end
  if not any then return nil end
  local b = {key = key, path = path}
  for i = 1, #BUDGET_AMOUNTS do
    local n = i64_norm(v[i] or '0')
    if n == nil then return nil, 'budget ' .. path .. ' holds a malformed ' .. BUDGET_READ[i] end
    b[BUDGET_AMOUNTS[i]] = n
  end
  b.over = (v[7] == 'true')
  b.status = v[8] or 'ACTIVE'
  if b.status == '' then b.status = 'ACTIVE' end
  if not BUDGET_STATUSES[b.status] then return nil, 'budget ' .. path .. ' has an invalid status' end
  if v[9] and v[9] ~= '' then b.caps = v[9] end
  return b
end

-- snapshots reads the post-mutation balance of every budget in bs.
local function snapshots(bs)
  local out = {}
  for i, b in ipairs(bs) do out[i] = balance_of(b.key, b.path) end
  return out
end
-- </shared:budget>
-- <shared:reservation>
-- load_reservation checks the settlement preconditions shared by commit,
-- release and extend after the replay check: record, tenant guard (CLOSED
-- only; settlement of a SUSPENDED tenant proceeds), state.
-- Returns the record or nil, code, message.
local function load_reservation(r, tenant_key)
  local conf, terr = tenant_conf(tenant_key)
  if conf == nil then return nil, 'INTERNAL_ERROR', terr end
  if conf.status == 'CLOSED' then return nil, 'TENANT_CLOSED', 'tenant is closed' end
  if r.state == 'EXPIRED' then return nil, 'RESERVATION_EXPIRED', 'reservation expired' end
  if r.state == 'COMMITTED' or r.state == 'RELEASED' then
    return nil, 'RESERVATION_FINALIZED', 'reservation is already ' .. r.state
  end
  if r.state ~= 'ACTIVE' then return nil, 'INTERNAL_ERROR', 'reservation has an invalid state' end
  r.n_expires = small_int(r.expires_at)
  r.n_grace = small_int(r.grace_ms)
  r.E = i64_norm(r.estimate)
  r.scopes = jdecode(r.budgeted)
  if r.n_expires == nil or r.n_grace == nil or r.E == nil or r.scopes == nil or r.unit == nil then
    return nil, 'INTERNAL_ERROR', 'reservation record is corrupt'
  end
  return r
end

-- reservation_budgets loads the budgets of the reservation's snapshot of
-- budgeted scopes. A budget hash that no longer exists is skipped (nothing
-- left to settle against); a corrupt one fails closed.
local function reservation_budgets(prefix, r)
  local bs = {}
  for _, path in ipairs(r.scopes) do
    local b, err = load_budget(prefix .. 'b:' .. path .. ':' .. r.unit, path)
    if err then return nil, err end
    if b then bs[#bs + 1] = b end
  end
  return bs
end

-- finalize marks a record terminal: out of the deadline index, kept for the
-- terminal retention (replays of commit/release keys live on the record).
local function finalize(key, deadline_key, rid)
  redis.call('ZREM', deadline_key, rid)
  redis.call('PEXPIRE', key, ms(RETENTION_MS))
end
-- </shared:reservation>

local now = now_ms()
local rid, hash = ARGV[1], ARGV[4]
local by = small_int(ARGV[2])
if by == nil or by < 1 then
  return fail('INVALID_REQUEST', 'extend_by_ms must be a positive integer', {field = 'extend_by_ms'})
end

-- Replay: (tenant, reservation, key) -> stored response; remaining_ttl_ms is
-- recomputed from the stored expiry, 0 once the reservation is no longer ACTIVE.
local prior = redis.call('GET', KEYS[6])
if prior then
  local rec = jdecode(prior)
  if rec == nil then return fail('INTERNAL_ERROR', 'idempotency record is corrupt') end
  if rec.h ~= hash then
    return fail('IDEMPOTENCY_MISMATCH', 'idempotency key was used with a different extend')
  end
  local snap = jdecode(rec.resp)
  local rem = 0
  if snap and redis.call('HGET', KEYS[3], 'state') == 'ACTIVE' then
    rem = math.max(0, (tonumber(snap.expires_at_ms) or 0) - now)
  end
  return ok({replay = true, resp = rec.resp, rem_ttl = ms(rem)})
end

local r = hgetall(KEYS[3])
if next(r) == nil then return fail('NOT_FOUND', 'reservation ' .. rid .. ' not found') end
local code, msg
r, code, msg = load_reservation(r, KEYS[2])
if r == nil then return fail(code, msg) end
if now > r.n_expires then
  return fail('RESERVATION_EXPIRED', 'reservation expired at ' .. r.expires_at .. '; extend allows no grace')
end
local count, max_ext = small_int(r.ext_count or '0'), small_int(r.max_ext or '10')
if count == nil or max_ext == nil then return fail('INTERNAL_ERROR', 'reservation record is corrupt') end
if count >= max_ext then
  return fail('MAX_EXTENSIONS_EXCEEDED', 'reservation was already extended ' .. ms(count) .. ' times (max ' .. ms(max_ext) .. ')',
    {extension_count = ms(count), max_extensions = ms(max_ext)})
end

local bs, berr = reservation_budgets(KEYS[1], r)
if bs == nil then return fail('INTERNAL_ERROR', berr) end

local expires_at = r.n_expires + by
count = count + 1
redis.call('HSET', KEYS[3], 'expires_at', ms(expires_at), 'ext_count', ms(count), 'extend_metadata', ARGV[5])
redis.call('ZADD', KEYS[4], ms(expires_at + r.n_grace), rid)
redis.call('ZADD', KEYS[5], ms(expires_at), rid)

-- Keep the reserve idempotency mapping alive while the reservation can still
-- be settled, so a late retry of the create replays instead of double-reserving.
local rkey = KEYS[1] .. 'idem:reserve:' .. (r.idem_key or '')
local need = expires_at + r.n_grace - now
local pttl = redis.call('PTTL', rkey)
if r.idem_key and pttl >= 0 and pttl < need then redis.call('PEXPIRE', rkey, ms(need)) end

local snap = cjson.encode({status = 'ACTIVE', unit = r.unit, expires_at_ms = ms(expires_at),
  balances = snapshots(bs), extension_count = ms(count)})
redis.call('SET', KEYS[6], cjson.encode({h = hash, resp = snap}), 'PX', ms(math.max(need, 1000)))

return ok({replay = false, resp = snap, rem_ttl = ms(expires_at - now)})
