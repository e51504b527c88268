-- ledger/decide: evaluate a reservation without making one (PROTOCOL.md §b.2).
-- Budget and tenant conditions are DENY results, never errors; only a budget
-- that exists solely in another unit (UNIT_MISMATCH), a malformed tenant
-- record and an idempotency mismatch are errors. Writes only the idempotency
-- record and, on DENY, a reservation.denied event.
--
-- KEYS: 1 tenant prefix   2 tenant record   3 budgets index
--       4 idempotency record (endpoint "decide")   5 event stream
--       6.. budget hash of each affected scope in the request unit, canonical order
-- ARGV: 1 unit   2 estimate (decimal)   3 idempotency key   4 payload hash
--       5 scope path   6 affected scopes (JSON array)   7 subject (JSON)
--       8 action (JSON)   9 event context
-- Result: ok({replay = bool, resp = <snapshot JSON>, denied = <reason>|nil})
--   snapshot: {decision, reason_code?, caps?, affected}

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
-- <shared:check>
local CHECK_MSG = {
  BUDGET_FROZEN = 'budget is frozen',
  BUDGET_CLOSED = 'budget is closed',
  OVERDRAFT_LIMIT_EXCEEDED = 'budget is over its overdraft limit',
  DEBT_OUTSTANDING = 'budget has outstanding debt and no overdraft limit',
  BUDGET_EXCEEDED = 'insufficient remaining budget',
}

-- check_scope applies the reserve-time rules to one budget in the protocol's
-- order (frozen, closed, over limit, debt outstanding, remaining); first wins.
local function check_scope(b, E)
  if b.status == 'FROZEN' then return 'BUDGET_FROZEN' end
  if b.status == 'CLOSED' then return 'BUDGET_CLOSED' end
  if b.over then return 'OVERDRAFT_LIMIT_EXCEEDED' end
  if i64_cmp(b.debt, '0') > 0 and b.lim == '0' then return 'DEBT_OUTSTANDING' end
  if i64_cmp(b.rem, E) < 0 then return 'BUDGET_EXCEEDED' end
  return nil
end

-- load_scopes reads the budget of every affected scope (keys from KEYS[first]);
-- returns the budgeted ones in canonical order, or nil and a message.
local function load_scopes(first, scopes)
  local bs = {}
  for i = 1, #scopes do
    local b, err = load_budget(KEYS[first + i - 1], scopes[i])
    if err then return nil, err end
    if b then bs[#bs + 1] = b end
  end
  return bs
end

-- other_units finds the first derived scope (canonical order) that has
-- budgets only in other units, via the lex index "<scope_path>|<UNIT>".
local function other_units(budgets_key, scopes)
  for i = 1, #scopes do
    local m = redis.call('ZRANGEBYLEX', budgets_key, '[' .. scopes[i] .. '|', '(' .. scopes[i] .. '}', 'LIMIT', 0, 8)
    if #m > 0 then
      local units = {}
      for j = 1, #m do units[j] = string.sub(m[j], #scopes[i] + 2) end
      return scopes[i], table.concat(units, ',')
    end
  end
  return nil
end
-- </shared:check>

local now = now_ms()
local unit = ARGV[1]
local E = i64_norm(ARGV[2])
if E == nil or i64_cmp(E, '0') < 0 then
  return fail('INVALID_REQUEST', 'estimate.amount must be an integer in 0..2^63-1', {field = 'estimate.amount'})
end
local hash, scope_path = ARGV[4], ARGV[5]
local scopes = jdecode(ARGV[6])
if scopes == nil or #scopes == 0 or #scopes ~= #KEYS - 5 then
  return fail('INTERNAL_ERROR', 'decide: affected scopes do not match the budget keys')
end

local prior = redis.call('GET', KEYS[4])
if prior then
  local rec = jdecode(prior)
  if rec == nil then return fail('INTERNAL_ERROR', 'idempotency record is corrupt') end
  if rec.h ~= hash then
    return fail('IDEMPOTENCY_MISMATCH', 'idempotency key was used with a different request')
  end
  return ok({replay = true, resp = rec.resp})
end

local function answer(snap_tbl, reason)
  local snap = cjson.encode(snap_tbl)
  if reason then
    local emit = event_emitter(KEYS[5], ARGV[9], now)
    -- REF: decide denials are attributed to the tenant-level scope.
    emit('reservation.denied', 'reservation', scopes[1], {
      scope = scopes[1], unit = unit, reason_code = reason, requested_amount = E,
      action = jdecode(ARGV[8]), subject = jdecode(ARGV[7]),
    })
  end
  redis.call('SET', KEYS[4], cjson.encode({h = hash, resp = snap}), 'PX', ms(DAY_MS))
  return ok({replay = false, resp = snap, denied = reason})
end

local function deny(reason)
  return answer({decision = 'DENY', reason_code = reason, affected = scopes}, reason)
end

local conf, terr = tenant_conf(KEYS[2])
if conf == nil then return fail('INTERNAL_ERROR', terr) end
if conf.status == 'CLOSED' then return deny('TENANT_CLOSED') end
if conf.status == 'SUSPENDED' then return deny('TENANT_SUSPENDED') end

local bs, berr = load_scopes(6, scopes)
if bs == nil then return fail('INTERNAL_ERROR', berr) end
for _, b in ipairs(bs) do
  local code = check_scope(b, E)
  if code then return deny(code) end
end
if #bs == 0 then
  local other, units = other_units(KEYS[3], scopes)
  if other then
    return fail('UNIT_MISMATCH', 'no budget in ' .. unit .. '; ' .. other .. ' is budgeted in ' .. units,
      {scope = other, requested_unit = unit, expected_units = units})
  end
  return deny('BUDGET_NOT_FOUND')
end

local deepest = bs[#bs]
if deepest.path == scopes[#scopes] and deepest.caps then
  if jdecode(deepest.caps) == nil then
    return fail('INTERNAL_ERROR', 'budget ' .. deepest.path .. ' has malformed caps')
  end
  return answer({decision = 'ALLOW_WITH_CAPS', caps = deepest.caps, affected = scopes}, nil)
end
return answer({decision = 'ALLOW', affected = scopes}, nil)
