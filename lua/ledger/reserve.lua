-- ledger/reserve: create a reservation (live) or evaluate one (dry run).
-- include: lib/ledger_util.lua lib/idem.lua lib/ledger_tenant.lua lib/ledger_budget.lua lib/ledger_check.lua lib/ledger_snapshot.lua lib/keys.lua
-- docs/protocol.md#reserve, docs/protocol.md#idempotency-and-replay, docs/protocol.md#events.
--
-- KEYS: 1 tenant prefix "cy:{t:T}:"   2 tenant record     3 budgets index
--       4 reservation hash (new id)   5 deadline index    6 created index
--       7 expires index               8 idempotency record (endpoint "reserve")
--       9 event stream
--       10.. budget hash of each affected scope in the request unit, canonical order
-- ARGV: 1 mode ('live' | 'dry')       2 reservation id    3 unit (TOKENS, ...)
--       4 estimate (decimal)          5 ttl_ms ('' = tenant default)
--       6 grace_ms                    7 overage policy ('' = tenant default)
--       8 idempotency key             9 payload hash (pkg/idempotency)
--       10 scope path                 11 affected scopes (JSON array, canonical order)
--       12 subject (JSON)             13 action (JSON)     14 metadata (JSON or '')
--       15 event context (pkg/events)
--       Extra ARGV are ignored (time always comes from Redis TIME).
-- Result: ok({replay = bool, resp = <snapshot JSON>, rem_ttl = '<ms>' (live only),
--             denied = <reason> (dry-run DENY only)})
--   The snapshot is the response as replays return it: a live reserve rebuilds
--   it from the record's fields (balances packed in `rbal`; records written
--   before that keep a `reserve_resp` copy), dry runs keep it in the
--   idempotency record.
-- Refusals: INVALID_REQUEST, IDEMPOTENCY_MISMATCH, INTERNAL_ERROR, TENANT_CLOSED,
--   TENANT_SUSPENDED, BUDGET_FROZEN, BUDGET_CLOSED, OVERDRAFT_LIMIT_EXCEEDED,
--   DEBT_OUTSTANDING, BUDGET_EXCEEDED, UNIT_MISMATCH, NOT_FOUND, AMOUNT_OVERFLOW.
--   (A dry run turns budget and tenant refusals into a DENY result.)

local now = now_ms()
local mode, rid, unit = ARGV[1], ARGV[2], ARGV[3]
local dry = (mode == 'dry')
if mode ~= 'live' and not dry then return fail('INTERNAL_ERROR', 'reserve: unknown mode') end
local E = i64_norm(ARGV[4])
if E == nil or i64_cmp(E, '0') < 0 then
  return fail('INVALID_REQUEST', 'estimate.amount must be an integer in 0..2^63-1', {field = 'estimate.amount'})
end
local idem_key, hash, scope_path = ARGV[8], ARGV[9], ARGV[10]
local scopes = jdecode(ARGV[11])
if scopes == nil or #scopes == 0 or #scopes ~= #KEYS - 9 then
  return fail('INTERNAL_ERROR', 'reserve: affected scopes do not match the budget keys')
end

-- 1. Idempotency: a replay returns the stored snapshot, a different payload is
-- a mismatch; both precede the tenant guard (docs/protocol.md#idempotency-and-replay replay precedence).
-- Live records keep the reservation id without its 'r_<tenant>_' prefix.
local rid_prefix = 'r_' .. key_tenant(KEYS[1]) .. '_'
local rec, refusal = idem_check(KEYS[8], hash, 'idempotency key was used with a different request', nil, rid_prefix)
if refusal then return refusal end
if rec then
  if rec.id then
    local r = redis.call('HMGET', key_reservation(KEYS[1], rec.id), 'state', 'reserve_resp', 'id', 'estimate', 'unit',
      'expires_at', 'exp0', 'scope_path', 'affected', 'caps', 'rbal', 'budgeted', 'grace_ms', 'policy')
    local snap, exp = r[2], r[7] or r[6]
    if snap then
      -- A record written before records were compacted: its stored copy.
      local old = jdecode(snap)
      if old == nil then snap = nil else exp = old.expires_at_ms end
    elseif r[3] and r[8] and r[11] then
      local bal = unpack_balances(r[11], jdecode(r[12]) or {})
      if bal then
        snap = reserve_snapshot(r[3], r[4], r[5], r[7] or r[6], r[8], jdecode(r[9]) or scope_prefixes(r[8]),
          r[10] or nil, bal, r[13], r[14])
      end
    end
    if not snap then
      return fail('INTERNAL_ERROR', 'replay unavailable for this idempotency key; the reservation record is gone')
    end
    local rem = 0
    if r[1] == 'ACTIVE' then rem = math.max(0, (tonumber(exp) or 0) - now) end
    return ok({replay = true, resp = snap, rem_ttl = ms(rem)})
  end
  return ok({replay = true, resp = rec.resp})
end

-- The emitter decodes the event context; most reserves emit nothing, so it is
-- built on the first event only.
local emitter = nil
local function emit(...)
  if emitter == nil then emitter = event_emitter(KEYS[9], ARGV[15], now) end
  return emitter(...)
end

-- deny answers a dry run with DENY (a 200 result, remembered like any success)
-- and records a reservation.denied event.
local function deny(reason)
  local snap = cjson.encode({
    dry = true, decision = 'DENY', reason_code = reason, unit = unit,
    scope_path = scope_path, affected = scopes,
  })
  emit('reservation.denied', 'reservation', scope_path, {
    scope = scope_path, unit = unit, reason_code = reason, requested_amount = E,
    action = jdecode(ARGV[13]), subject = jdecode(ARGV[12]),
  })
  idem_put(KEYS[8], hash, ms(DAY_MS), snap)
  return ok({replay = false, resp = snap, denied = reason})
end

-- 2. Tenant guard.
local conf, terr = tenant_conf(KEYS[2])
if conf == nil then return fail('INTERNAL_ERROR', terr) end
if conf.status == 'CLOSED' then
  if dry then return deny('TENANT_CLOSED') end
  return fail('TENANT_CLOSED', 'tenant is closed')
end
if conf.status == 'SUSPENDED' then
  if dry then return deny('TENANT_SUSPENDED') end
  return fail('TENANT_SUSPENDED', 'tenant is suspended: no new reservations')
end

-- 3. Budgets of every derived scope, canonical order; first failure wins.
local bs, berr = load_scopes(10, scopes)
if bs == nil then return fail('INTERNAL_ERROR', berr) end
for _, b in ipairs(bs) do
  local code = check_scope(b, E)
  if code then
    if dry then return deny(code) end
    return fail(code, CHECK_MSG[code] .. ' at ' .. b.path,
      {scope = b.path, remaining = b.rem, requested = E, unit = unit})
  end
end
if #bs == 0 then
  local other, units = other_units(KEYS[3], scopes)
  if other then
    return fail('UNIT_MISMATCH', 'no budget in ' .. unit .. '; ' .. other .. ' is budgeted in ' .. units,
      {scope = other, requested_unit = unit, expected_units = units})
  end
  if dry then return deny('BUDGET_NOT_FOUND') end
  return fail('NOT_FOUND', 'Budget not found for provided scope: ' .. scopes[#scopes], {scope = scopes[#scopes]})
end

-- 4. Caps come from the budget at the deepest derived scope.
local caps = nil
local deepest = bs[#bs]
if deepest.path == scopes[#scopes] and deepest.caps then
  if jdecode(deepest.caps) == nil then
    return fail('INTERNAL_ERROR', 'budget ' .. deepest.path .. ' has malformed caps')
  end
  caps = deepest.caps
end
local decision = caps and 'ALLOW_WITH_CAPS' or 'ALLOW'

local policy = resolve_policy(ARGV[7], conf)
if policy == nil then
  return fail('INVALID_REQUEST', 'the tenant default overage policy is invalid; set overage_policy explicitly', {field = 'overage_policy'})
end
local grace = small_int(ARGV[6])
if grace == nil then return fail('INVALID_REQUEST', 'grace_period_ms is invalid', {field = 'grace_period_ms'}) end

if dry then
  local balances = {}
  for i, b in ipairs(bs) do balances[i] = balance_now(b) end
  local snap = cjson.encode({
    dry = true, decision = decision, reserved = E, unit = unit, scope_path = scope_path,
    affected = scopes, caps = caps, balances = balances, grace_ms = ms(grace), policy = policy,
  })
  idem_put(KEYS[8], hash, ms(DAY_MS), snap)
  return ok({replay = false, resp = snap})
end

-- 5. Live: effective TTL (request, else tenant default; capped by the tenant max).
local ttl = conf.default_ttl
if ARGV[5] ~= '' then
  ttl = small_int(ARGV[5])
  if ttl == nil then return fail('INVALID_REQUEST', 'ttl_ms is invalid', {field = 'ttl_ms'}) end
end
if conf.max_ttl > 0 and ttl > conf.max_ttl then ttl = conf.max_ttl end
local expires_at = now + ttl

-- Overflow pre-check of every increment before the first write.
local new_res, new_rem = {}, {}
for i, b in ipairs(bs) do
  new_res[i] = i64_add(b.res, E)
  new_rem[i] = i64_sub(b.rem, E)
  if new_res[i] == nil or new_rem[i] == nil then
    return fail('AMOUNT_OVERFLOW', 'reserving ' .. E .. ' would overflow int64 at ' .. b.path, {scope = b.path})
  end
end

-- 6. Mutate: hold the estimate on every budgeted scope.
local budgeted, balances = {}, {}
for i, b in ipairs(bs) do
  redis.call('HSET', b.key, 'reserved', new_res[i], 'remaining', new_rem[i])
  budgeted[i] = b.path
  balances[i] = balance_now(b, new_rem[i], new_res[i])
  if i64_cmp(b.rem, '0') > 0 and new_rem[i] == '0' then
    emit('budget.exhausted', 'budget', b.path, {
      scope = b.path, unit = unit, threshold = 1, direction = 'rising', remaining = '0',
      allocated = b.alloc, spent = b.spent, reserved = new_res[i],
    })
  end
end

local snap = reserve_snapshot(rid, E, unit, ms(expires_at), scope_path, scopes, caps, balances, ms(grace), policy)

-- 7. The record, its indexes and the idempotency mapping. The record keeps
-- what the answer is rebuilt from (docs/design.md#reservation-records):
-- balances packed in `rbal`, caps and metadata only when present, affected
-- scopes only when they are not the scope path's prefixes; no tenant field
-- (the key names the tenant).
redis.call('HSET', KEYS[4],
  'id', rid, 'state', 'ACTIVE', 'unit', unit, 'estimate', E,
  'scope_path', scope_path, 'budgeted', cjson.encode(budgeted),
  'created_at', ms(now), 'expires_at', ms(expires_at), 'grace_ms', ms(grace), 'policy', policy,
  'max_ext', ms(conf.max_ext), 'ext_count', '0', 'idem_key', idem_key,
  'subject', ARGV[12], 'action', ARGV[13], 'rbal', pack_balances(balances, budgeted))
-- Optional fields only when set (an absent field reads as empty).
if ARGV[14] ~= '' then redis.call('HSET', KEYS[4], 'metadata', ARGV[14]) end
if caps then redis.call('HSET', KEYS[4], 'caps', caps) end
if not same_list(scopes, scope_prefixes(scope_path)) then redis.call('HSET', KEYS[4], 'affected', ARGV[11]) end
redis.call('ZADD', KEYS[5], ms(expires_at + grace), rid)
redis.call('ZADD', KEYS[6], ms(now), rid)
redis.call('ZADD', KEYS[7], ms(expires_at), rid)
idem_put(KEYS[8], hash, ms(math.max(ttl + grace, DAY_MS)), nil, rid, rid_prefix)

-- Bounded trim of the listing indexes: entries older than two retention
-- periods point at records that are long gone.
local old = redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', '(' .. ms(now - 2 * RETENTION_MS), 'LIMIT', 0, 16)
if #old > 0 then
  redis.call('ZREM', KEYS[6], unpack(old))
  redis.call('ZREM', KEYS[7], unpack(old))
end

return ok({replay = false, resp = snap, rem_ttl = ms(ttl)})
