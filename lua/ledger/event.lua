-- ledger/event: debit an actual cost directly, without a reservation
-- (PROTOCOL.md §b.9). Never blocked by is_over_limit or outstanding debt: only
-- by tenant status, budget status and its own overage policy.
--
-- KEYS: 1 tenant prefix   2 tenant record   3 budgets index   4 event record
--       5 idempotency record (endpoint "event")   6 event stream
--       7.. budget hash of each affected scope in the request unit, canonical order
-- ARGV: 1 event id   2 unit   3 actual (decimal)   4 overage policy ('' = tenant default)
--       5 idempotency key   6 payload hash   7 scope path   8 affected scopes (JSON array)
--       9 subject (JSON)   10 action (JSON)   11 metrics (JSON or '')   12 metadata (JSON or '')
--       13 client_time_ms (advisory, stored only, never used as a clock)   14 event context
-- Result: ok({replay = bool, resp = <snapshot JSON>, debt = '<debt incurred>'})
--   snapshot: {status = 'APPLIED', event_id, unit, charged? (only when capped below
--   actual), balances, debt_incurred}
-- Refusals: INVALID_REQUEST, IDEMPOTENCY_MISMATCH, TENANT_CLOSED, TENANT_SUSPENDED,
--   BUDGET_FROZEN, BUDGET_CLOSED, BUDGET_EXCEEDED, OVERDRAFT_LIMIT_EXCEEDED,
--   UNIT_MISMATCH, NOT_FOUND, AMOUNT_OVERFLOW, INTERNAL_ERROR.

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
-- <shared:settle>
-- settle plans charging actual A against budgets bs that hold estimate E
-- (E = 0 for a direct-debit event), exactly as PROTOCOL.md §b.3:
--   A <= E: reserved -= E, remaining += E - A, spent += A (any policy).
--   A > E, REJECT: BUDGET_EXCEEDED.
--   A > E, ALLOW_IF_AVAILABLE: cap = min(delta, min max(rem, 0)); never debt;
--     scopes whose own remaining < delta are flagged over limit when capped.
--   A > E, ALLOW_WITH_OVERDRAFT: zero-limit scopes cap as above; scopes with a
--     limit take the unfunded part as debt, refused (whole commit) when debt
--     would exceed the limit.
-- Every new value is computed with int64.lua first; any overflow refuses the
-- whole operation before the first write. Returns a plan
-- {charged, debt_total, delta, rows = {{b, rem, res, spent, debt, over, deficit}}}
-- or nil, code, message, details.
local function settle(bs, E, A, policy)
  local delta = i64_sub(A, E)
  local rows = {}
  local charged, cap
  if i64_cmp(delta, '0') <= 0 then
    local back = i64_sub(E, A)
    for i, b in ipairs(bs) do
      rows[i] = {b = b, rem = i64_add(b.rem, back), res = i64_sub(b.res, E), spent = i64_add(b.spent, A),
        debt = b.debt, over = b.over, deficit = '0'}
    end
    charged = A
  else
    if policy == 'REJECT' then
      return nil, 'BUDGET_EXCEEDED', 'actual exceeds the estimate and the overage policy is REJECT',
        {requested = A, reserved = E}
    end
    cap = delta
    for _, b in ipairs(bs) do
      if (policy == 'ALLOW_IF_AVAILABLE' or b.lim == '0') and i64_cmp(b.rem, delta) < 0 then
        cap = i64_min(cap, i64_pos(b.rem))
      end
    end
    if policy == 'ALLOW_WITH_OVERDRAFT' then
      for _, b in ipairs(bs) do
        if b.lim ~= '0' and i64_cmp(b.rem, cap) < 0 then
          local deficit = i64_sub(cap, i64_pos(b.rem))
          local nd = i64_add(b.debt, deficit)
          if nd == nil or i64_cmp(nd, b.lim) > 0 then
            return nil, 'OVERDRAFT_LIMIT_EXCEEDED', 'the unfunded part would push debt above the overdraft limit at ' .. b.path,
              {scope = b.path, debt = b.debt, overdraft_limit = b.lim, requested = deficit, remaining = b.rem}
          end
        end
      end
    end
    for i, b in ipairs(bs) do
      local row = {b = b, rem = i64_sub(b.rem, cap), res = i64_sub(b.res, E), debt = b.debt, over = b.over, deficit = '0'}
      local funded = cap
      if i64_cmp(b.rem, cap) < 0 then
        funded = i64_pos(b.rem)
        row.deficit = i64_sub(cap, funded)
        row.debt = i64_add(b.debt, row.deficit)
      end
      row.spent = i64_add(b.spent, funded)
      if row.spent then row.spent = i64_add(row.spent, E) end
      if row.debt and b.lim ~= '0' and i64_cmp(row.debt, b.lim) > 0 then row.over = true end
      if i64_cmp(cap, delta) < 0 and i64_cmp(b.rem, delta) < 0 and (policy == 'ALLOW_IF_AVAILABLE' or b.lim == '0') then
        row.over = true
      end
      rows[i] = row
    end
    charged = i64_add(E, cap)
  end
  local debt_total = '0'
  for _, row in ipairs(rows) do
    if row.rem == nil or row.res == nil or row.spent == nil or row.debt == nil then
      return nil, 'AMOUNT_OVERFLOW', 'the charge would overflow int64 at ' .. row.b.path, {scope = row.b.path}
    end
    debt_total = i64_add_sat(debt_total, row.deficit)
  end
  return {charged = charged, debt_total = debt_total, delta = delta, rows = rows}
end

-- apply_plan writes a settlement plan (canonical strings, HSET).
local function apply_plan(plan)
  for _, row in ipairs(plan.rows) do
    local b = row.b
    if row.debt ~= b.debt then
      redis.call('HSET', b.key, 'remaining', row.rem, 'reserved', row.res, 'spent', row.spent, 'debt', row.debt)
    else
      redis.call('HSET', b.key, 'remaining', row.rem, 'reserved', row.res, 'spent', row.spent)
    end
    if row.over and not b.over then redis.call('HSET', b.key, 'is_over_limit', 'true') end
  end
end

-- emit_transitions emits the per-scope budget events of a settlement:
-- exhausted (remaining > 0 -> exactly 0), over_limit_entered (false -> true),
-- debt_incurred (new debt in this scope). rid is nil for direct debits.
local function emit_transitions(emit, unit, plan, rid, policy)
  for _, row in ipairs(plan.rows) do
    local b = row.b
    if i64_cmp(b.rem, '0') > 0 and row.rem == '0' then
      emit('budget.exhausted', 'budget', b.path, {
        scope = b.path, unit = unit, threshold = 1, direction = 'rising', remaining = '0',
        allocated = b.alloc, spent = row.spent, reserved = row.res,
      })
    end
    if row.over and not b.over then
      emit('budget.over_limit_entered', 'budget', b.path, {
        scope = b.path, unit = unit, debt = row.debt, overdraft_limit = b.lim, is_over_limit = true,
      })
    end
    if row.deficit ~= '0' then
      emit('budget.debt_incurred', 'budget', b.path, {
        scope = b.path, unit = unit, reservation_id = rid, debt_incurred = row.deficit,
        total_debt = row.debt, overdraft_limit = b.lim, overage_policy = policy,
      })
    end
  end
end
-- </shared:settle>

local now = now_ms()
local eid, unit = ARGV[1], ARGV[2]
local A = i64_norm(ARGV[3])
if A == nil or i64_cmp(A, '0') < 0 then
  return fail('INVALID_REQUEST', 'actual.amount must be an integer in 0..2^63-1', {field = 'actual.amount'})
end
local idem_key, hash, scope_path = ARGV[5], ARGV[6], ARGV[7]
local scopes = jdecode(ARGV[8])
if scopes == nil or #scopes == 0 or #scopes ~= #KEYS - 6 then
  return fail('INTERNAL_ERROR', 'event: affected scopes do not match the budget keys')
end

local prior = redis.call('GET', KEYS[5])
if prior then
  local rec = jdecode(prior)
  if rec == nil then return fail('INTERNAL_ERROR', 'idempotency record is corrupt') end
  if rec.h ~= hash then
    return fail('IDEMPOTENCY_MISMATCH', 'idempotency key was used with a different event')
  end
  local resp = redis.call('HGET', KEYS[1] .. 'ev:' .. (rec.id or ''), 'resp')
  if not resp then return fail('INTERNAL_ERROR', 'replay unavailable for this idempotency key; the event record is gone') end
  return ok({replay = true, resp = resp})
end

local conf, terr = tenant_conf(KEYS[2])
if conf == nil then return fail('INTERNAL_ERROR', terr) end
if conf.status == 'CLOSED' then return fail('TENANT_CLOSED', 'tenant is closed') end
if conf.status == 'SUSPENDED' then return fail('TENANT_SUSPENDED', 'tenant is suspended: no new spending') end
local policy = resolve_policy(ARGV[4], conf)
if policy == nil then
  return fail('INVALID_REQUEST', 'the tenant default overage policy is invalid; set overage_policy explicitly', {field = 'overage_policy'})
end

local bs, berr = load_scopes(7, scopes)
if bs == nil then return fail('INTERNAL_ERROR', berr) end
for _, b in ipairs(bs) do
  if b.status == 'FROZEN' then return fail('BUDGET_FROZEN', CHECK_MSG.BUDGET_FROZEN .. ' at ' .. b.path, {scope = b.path}) end
  if b.status == 'CLOSED' then return fail('BUDGET_CLOSED', CHECK_MSG.BUDGET_CLOSED .. ' at ' .. b.path, {scope = b.path}) end
  if policy == 'REJECT' and i64_cmp(b.rem, A) < 0 then
    return fail('BUDGET_EXCEEDED', CHECK_MSG.BUDGET_EXCEEDED .. ' at ' .. b.path,
      {scope = b.path, remaining = b.rem, requested = A, unit = unit})
  end
end
if #bs == 0 then
  local other, units = other_units(KEYS[3], scopes)
  if other then
    return fail('UNIT_MISMATCH', 'no budget in ' .. unit .. '; ' .. other .. ' is budgeted in ' .. units,
      {scope = other, requested_unit = unit, expected_units = units})
  end
  return fail('NOT_FOUND', 'Budget not found for provided scope: ' .. scopes[#scopes], {scope = scopes[#scopes]})
end

-- REJECT passed its check (remaining >= A everywhere), so charging as
-- ALLOW_IF_AVAILABLE charges exactly A.
local charge_policy = policy
if policy == 'REJECT' then charge_policy = 'ALLOW_IF_AVAILABLE' end
local plan, pcode, pmsg, pdet = settle(bs, '0', A, charge_policy)
if plan == nil then return fail(pcode, pmsg, pdet) end

apply_plan(plan)
local emit = event_emitter(KEYS[6], ARGV[14], now)
emit_transitions(emit, unit, plan, nil, policy)

local budgeted = {}
for i, b in ipairs(bs) do budgeted[i] = b.path end
local resp = {status = 'APPLIED', event_id = eid, unit = unit, balances = snapshots(bs), debt_incurred = plan.debt_total}
if i64_cmp(plan.charged, A) < 0 then resp.charged = plan.charged end
local snap = cjson.encode(resp)

redis.call('HSET', KEYS[4], 'id', eid, 'tenant', string.sub(KEYS[1], 7, -3), 'unit', unit, 'actual', A,
  'charged', plan.charged, 'debt_incurred', plan.debt_total, 'policy', policy, 'scope_path', scope_path,
  'affected', ARGV[8], 'budgeted', cjson.encode(budgeted), 'subject', ARGV[9], 'action', ARGV[10],
  'metrics', ARGV[11], 'metadata', ARGV[12], 'client_time_ms', ARGV[13], 'created_at', ms(now),
  'idem_key', idem_key, 'hash', hash, 'resp', snap)
redis.call('PEXPIRE', KEYS[4], ms(RETENTION_MS))
redis.call('SET', KEYS[5], cjson.encode({h = hash, id = eid}), 'PX', ms(7 * DAY_MS))

return ok({replay = false, resp = snap, debt = plan.debt_total})
