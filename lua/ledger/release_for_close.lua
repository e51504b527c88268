-- ledger/release_for_close: release up to ARGV[1] ACTIVE reservations of a
-- CLOSED tenant through the normal release arithmetic (PROTOCOL.md Part 1 §9,
-- Ambiguity 16), bypassing only the TENANT_CLOSED guard. The admin plane calls
-- it repeatedly after flipping the tenant to CLOSED until nothing remains.
-- Each release is final (state RELEASED), so neither the sweeper nor a second
-- call can refund a hold twice. Emits reservation.released_via_tenant_cascade
-- per reservation.
--
-- KEYS: 1 tenant prefix   2 tenant record   3 deadline index   4 event stream
-- ARGV: 1 batch size (1..1000)   2 event context
-- Result: ok({released = n, quarantined = n, remaining = <ids still in the deadline index>})
-- Refusals: INVALID_STATE (tenant record absent or not CLOSED), INTERNAL_ERROR.

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
-- <shared:release>
-- release_hold returns a reservation's estimate to every budget of its
-- snapshot (reserved -= E, remaining += E), overflow-checked before the first
-- write. Returns the budgets touched, or nil, code, message.
local function release_hold(prefix, r)
  local bs, err = reservation_budgets(prefix, r)
  if bs == nil then return nil, 'INTERNAL_ERROR', err end
  local res, rem = {}, {}
  for i, b in ipairs(bs) do
    res[i] = i64_sub(b.res, r.E)
    rem[i] = i64_add(b.rem, r.E)
    if res[i] == nil or rem[i] == nil then
      return nil, 'AMOUNT_OVERFLOW', 'releasing would overflow int64 at ' .. b.path
    end
  end
  for i, b in ipairs(bs) do
    redis.call('HSET', b.key, 'reserved', res[i], 'remaining', rem[i])
  end
  return bs
end
-- </shared:release>

local now = now_ms()
local batch = small_int(ARGV[1]) or 100
if batch < 1 then batch = 1 end
if batch > 1000 then batch = 1000 end

local conf, terr = tenant_conf(KEYS[2])
if conf == nil then return fail('INTERNAL_ERROR', terr) end
if not conf.present or conf.status ~= 'CLOSED' then
  return fail('INVALID_STATE', 'tenant must be CLOSED before its reservations are released')
end

local emit = event_emitter(KEYS[4], ARGV[2], now)
local ids = redis.call('ZRANGE', KEYS[3], '0', ms(batch - 1))
local released, quarantined = 0, 0

-- quarantine sets a reservation that cannot be released aside (state and
-- ledger untouched, out of the deadline index, like the sweeper does) so one
-- corrupt record can never stall the cascade or leave a half-written batch.
local function quarantine(key, rid, reason)
  redis.call('HSET', key, 'quarantined_at', ms(now), 'quarantine_reason', reason)
  redis.call('ZREM', KEYS[3], rid)
  quarantined = quarantined + 1
end

for _, rid in ipairs(ids) do
  local key = KEYS[1] .. 'r:' .. rid
  local r = hgetall(key)
  if next(r) == nil or r.state ~= 'ACTIVE' then
    -- Stale index entry: nothing to release.
    redis.call('ZREM', KEYS[3], rid)
  else
    r.E = i64_norm(r.estimate)
    r.scopes = jdecode(r.budgeted)
    if r.E == nil or r.scopes == nil or r.unit == nil then
      quarantine(key, rid, 'CORRUPT_RECORD')
    else
      -- release_hold validates every budget before its first write, so a
      -- refusal here leaves this reservation's budgets untouched.
      local bs, code = release_hold(KEYS[1], r)
      if bs == nil then
        quarantine(key, rid, code)
      else
        local snap = cjson.encode({status = 'RELEASED', unit = r.unit, released = r.E, balances = snapshots(bs)})
        redis.call('HSET', key, 'state', 'RELEASED', 'finalized_at', ms(now), 'release_resp', snap,
          'release_reason', 'tenant_closed')
        finalize(key, KEYS[3], rid)
        emit('reservation.released_via_tenant_cascade', 'reservation', r.scope_path, {
          reservation_id = rid, scope = r.scope_path, unit = r.unit, released_amount = r.E,
          prior_status = 'ACTIVE', new_status = 'RELEASED', cascade_reason = 'tenant_closed',
        })
        released = released + 1
      end
    end
  end
end

return ok({released = released, quarantined = quarantined, remaining = redis.call('ZCARD', KEYS[3])})
