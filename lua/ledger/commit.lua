-- ledger/commit: settle a reservation with its actual cost (PROTOCOL.md §b.3).
--
-- KEYS: 1 tenant prefix   2 tenant record   3 reservation hash
--       4 deadline index  5 event stream
--   Budget hashes are derived from the record's budgeted scopes and unit as
--   KEYS[1] .. 'b:' .. scope .. ':' .. unit (same slot).
-- ARGV: 1 reservation id   2 actual unit   3 actual amount (decimal)
--       4 idempotency key  5 payload hash  6 metrics (JSON or '')
--       7 metadata (JSON or '')   8 event context
--       Extra ARGV are ignored (time always comes from Redis TIME).
-- Result: ok({replay = bool, resp = <snapshot JSON>, overage = '<A-E or 0>',
--             debt = '<debt incurred>'})
--   snapshot: {status = 'COMMITTED', unit, charged, released?, balances, debt_incurred}
-- Refusals: INVALID_REQUEST, NOT_FOUND, IDEMPOTENCY_MISMATCH, TENANT_CLOSED,
--   RESERVATION_EXPIRED, RESERVATION_FINALIZED, UNIT_MISMATCH, BUDGET_EXCEEDED,
--   OVERDRAFT_LIMIT_EXCEEDED, AMOUNT_OVERFLOW, INTERNAL_ERROR.

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
local rid, unit = ARGV[1], ARGV[2]
local A = i64_norm(ARGV[3])
if A == nil or i64_cmp(A, '0') < 0 then
  return fail('INVALID_REQUEST', 'actual.amount must be an integer in 0..2^63-1', {field = 'actual.amount'})
end
local idem_key, hash = ARGV[4], ARGV[5]

local r = hgetall(KEYS[3])
if next(r) == nil then return fail('NOT_FOUND', 'reservation ' .. rid .. ' not found') end

-- Replay: same key on a committed reservation.
if r.state == 'COMMITTED' and r.commit_key == idem_key then
  if r.commit_hash ~= hash then
    return fail('IDEMPOTENCY_MISMATCH', 'idempotency key was used with a different commit')
  end
  return ok({replay = true, resp = r.commit_resp})
end

local code, msg
r, code, msg = load_reservation(r, KEYS[2])
if r == nil then return fail(code, msg) end
if not POLICIES[r.policy or ''] then return fail('INTERNAL_ERROR', 'reservation has an invalid overage policy') end
if unit ~= r.unit then
  return fail('UNIT_MISMATCH', 'actual.unit must be ' .. r.unit, {requested_unit = unit, expected_units = r.unit})
end
if now > r.n_expires + r.n_grace then
  return fail('RESERVATION_EXPIRED', 'reservation expired at ' .. r.expires_at .. ' (+' .. r.grace_ms .. ' ms grace)')
end

local bs, berr = reservation_budgets(KEYS[1], r)
if bs == nil then return fail('INTERNAL_ERROR', berr) end
local plan, pcode, pmsg, pdet = settle(bs, r.E, A, r.policy)
if plan == nil then return fail(pcode, pmsg, pdet) end

apply_plan(plan)

local emit = event_emitter(KEYS[5], ARGV[8], now)
local overage = '0'
if i64_cmp(plan.delta, '0') > 0 then
  overage = plan.delta
  emit('reservation.commit_overage', 'reservation', r.scope_path, {
    reservation_id = rid, scope = r.scope_path, unit = unit, estimated_amount = r.E,
    actual_amount = A, overage = plan.delta, overage_policy = r.policy, debt_incurred = plan.debt_total,
  })
end
emit_transitions(emit, unit, plan, rid, r.policy)

local resp = {status = 'COMMITTED', unit = unit, charged = plan.charged, balances = snapshots(bs),
  debt_incurred = plan.debt_total}
if i64_cmp(plan.charged, r.E) < 0 then resp.released = i64_sub(r.E, plan.charged) end
local snap = cjson.encode(resp)

redis.call('HSET', KEYS[3], 'state', 'COMMITTED', 'charged', plan.charged, 'debt_incurred', plan.debt_total,
  'finalized_at', ms(now), 'commit_key', idem_key, 'commit_hash', hash, 'commit_resp', snap,
  'committed_metadata', ARGV[7], 'metrics', ARGV[6])
finalize(KEYS[3], KEYS[4], rid)

return ok({replay = false, resp = snap, overage = overage, debt = plan.debt_total})
