-- ledger/reserve: create a reservation (live) or evaluate one (dry run).
-- include: lib/ledger_util.lua lib/idem.lua lib/ledger_tenant.lua lib/ledger_budget.lua lib/ledger_check.lua lib/ledger_snapshot.lua lib/keys.lua lib/record_layout.lua lib/policy.lua lib/quota.lua lib/correlation.lua
-- docs/protocol.md#reserve, docs/protocol.md#idempotency-and-replay, docs/protocol.md#events.
--
-- KEYS: 1 tenant_prefix     "cy:{t:T}:"
--       2 tenant_record
--       3 budget_index
--       4 reservation       the reservation hash (new id)
--       5 deadlines         the deadline index
--       6 created_index
--       7 expires_index
--       8 idem_record       idempotency record (endpoint "reserve")
--       9 event_stream
--       10.. budgets        budget hash of each affected scope in the request
--                           unit, canonical order
-- ARGV: 1 mode              'live' | 'dry'
--       2 reservation_id
--       3 unit              TOKENS, ...
--       4 estimate          decimal
--       5 ttl_ms            '' = tenant default
--       6 grace_ms
--       7 overage_policy    '' = tenant default
--       8 idempotency_key
--       9 payload_hash      internal/idempotency
--       10 scope_path
--       11 affected         affected scopes (JSON array, canonical order; '' =
--                           the scope path's prefixes)
--       12 subject          JSON; '' = the subject the scope path implies, not stored
--       13 action           JSON
--       14 metadata         JSON or ''
--       15 event_ctx        event context (internal/eventctx.Arg)
--       16 observe_mode     the request's ('' | 'DISABLED' | 'OBSERVE' | 'ENFORCE')
--       17 action_kind
--       18 risk_class       the kind's ('' = an undeclared custom.* kind)
--       19 run_id           Subject.dimensions.run_id ('' = none)
--       20 policy_keys      the keys quota allowlists may match (JSON object of
--                           host, recipient_domain, resource_type as the kind's
--                           spec declares them; '' = none; actionkind.MatchKeys).
--                           Extra ARGV are ignored (time always comes from Redis TIME).
-- Observe mode (v0.1.26): the request's mode wins when set, else the
--   tenant's OBSERVE, else ENFORCE (DISABLED = ENFORCE). OBSERVE evaluates
--   as a dry run (nothing held), answers the decision enforcement would make
--   (DENY is a result) and emits reservation.observed_denied or
--   reservation.observed_allowed instead of reservation.denied, with dry_run
--   or without.
-- Result: okf({'OK', FLAT_V, '', '', replay (0|1), rem_ttl ('<ms>', live only, else ''),
--             denied (<reason>, dry-run or observed DENY only, else ''), <reserve snapshot fields>})
--   (lib/ledger_snapshot.lua). A live reserve's replay rebuilds the fields from
--   the record (balance rows rb<i>, packed again); a dry run keeps them in the
--   idempotency record (the snapshot fields as a JSON array).
-- Rate limit (v0.1.25 rate_limits.max_reservations_per_minute,
--   lib/policy_rate.lua): after the tenant guard, before governance; a live
--   reserve at the limit is LIMIT_EXCEEDED (details scope, policy_id, limit,
--   rate_limit, window, reset_at_ms, retry_after_ms); one that creates its
--   reservation counts in this run.
-- Governance (v0.1.26, lib/quota.lua): the matching policies' access lists,
--   risk-class quotas and per-kind quotas are evaluated after the tenant
--   guard and before the budgets; a live ALLOW counts the quota counters in
--   this run and keeps the per_run ones in the record (`qrun`).
-- Refusals: INVALID_REQUEST, IDEMPOTENCY_MISMATCH, INTERNAL_ERROR, TENANT_CLOSED,
--   TENANT_SUSPENDED, LIMIT_EXCEEDED, ACTION_KIND_DENIED, ACTION_KIND_NOT_ALLOWED,
--   ACTION_QUOTA_EXCEEDED, BUDGET_FROZEN, BUDGET_CLOSED, OVERDRAFT_LIMIT_EXCEEDED,
--   DEBT_OUTSTANDING, BUDGET_EXCEEDED, UNIT_MISMATCH, NOT_FOUND, AMOUNT_OVERFLOW.
--   (A dry run or an observed request turns rate-limit, governance, budget and
--   tenant refusals into a DENY result.) Governance and budget refusals carry
--   details.deny_detail (DenyDetail JSON).

local now = now_ms()
local mode, rid, unit = ARGV[1], ARGV[2], ARGV[3]
local dry = (mode == 'dry')
if mode ~= 'live' and not dry then return fail('INTERNAL_ERROR', 'reserve: unknown mode') end
local req_observe = ARGV[16] or ''
if req_observe ~= '' and req_observe ~= 'OBSERVE' and req_observe ~= 'ENFORCE' and req_observe ~= 'DISABLED' then
  return fail('INVALID_REQUEST', 'observe_mode must be DISABLED, OBSERVE or ENFORCE', {field = 'observe_mode'})
end
local E = canon(ARGV[4])
if E == nil or string.byte(E, 1) == 45 then
  return fail('INVALID_REQUEST', 'estimate.amount must be an integer in 0..2^63-1', {field = 'estimate.amount'})
end
local idem_key, hash, scope_path = ARGV[8], ARGV[9], ARGV[10]
local scopes = affected_arg(ARGV[11], scope_path)
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
    local rkey = key_reservation(KEYS[1], rec.id)
    local r = redis.call('HMGET', rkey, 'state', 'id', 'estimate', 'unit',
      'expires_at', 'exp0', 'scope_path', 'affected', 'caps', 'budgeted', 'grace_ms', 'policy')
    local out, exp = {'OK', FLAT_V, '', '', 1, '', ''}, r[6] or r[5]
    -- Balance rows rb<i> packed again.
    local budgeted, packed
    if r[7] and r[10] then
      budgeted, packed = record_replay().read_rows(rkey, 'rb', unpack_budgeted(r[10], r[7]) or {})
    end
    if not packed or packed == '' then
      return fail('INTERNAL_ERROR', 'replay unavailable for this idempotency key; the reservation record is gone')
    end
    reserve_reply(out, r[2] or rec.id, r[3], r[4], exp, r[7], jdecode(r[8]), r[9] or nil, budgeted, packed, r[11], r[12])
    local rem = 0
    if r[1] == 'ACTIVE' then rem = math.max(0, (tonumber(exp) or 0) - now) end
    out[6] = ms(rem)
    return okf(out)
  end
  -- A dry run's record holds its snapshot fields as a JSON array.
  local out = {'OK', FLAT_V, '', '', 1, '', ''}
  local stored = jdecode(rec.resp)
  if stored == nil or string.sub(rec.resp, 1, 1) ~= '[' then
    return fail('INTERNAL_ERROR', 'idempotency record is malformed')
  end
  for i = 1, #stored do out[7 + i] = stored[i] end
  return okf(out)
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
-- dry_answer stores a dry run's snapshot fields f in the idempotency record
-- and answers with them.
-- observe: the effective observe mode is OBSERVE (decided after the tenant
-- guard reads the tenant's mode; a closed or suspended tenant is refused
-- before it is consulted, as every policy rule is).
local observe = false

-- finish appends the v0.1.26 trailing snapshot fields: the DenyDetail JSON
-- ('' when none) and whether the answer was observed ('1' | ''); neither
-- when both are empty, so such answers stay as they were before them.
local function finish(f, dd)
  if dd or observe then
    f[#f + 1] = dd and cjson.encode(dd) or ''
    f[#f + 1] = observe and '1' or ''
  end
  return f
end

local function dry_answer(f, denied)
  idem_put(KEYS[8], hash, ms(DAY_MS), cjson.encode(f))
  local out = {'OK', FLAT_V, '', '', 0, '', denied or ''}
  for i = 1, #f do out[7 + i] = f[i] end
  return okf(out)
end

local function subject_json()
  return jdecode(ARGV[12] ~= '' and ARGV[12] or record_replay().implied_subject(scope_path))
end

-- deny answers DENY with its DenyDetail dd: a dry run records
-- reservation.denied, an observed request reservation.observed_denied; both
-- carry the denial's correlation id (lib/correlation.lua), so an observed
-- denial and the enforced one of the same cause join on it.
local function deny(reason, dd)
  local corr = CORR.deny(key_tenant(KEYS[1]), scope_path, ARGV[17] or '', dd)
  if observe then
    emit('reservation.observed_denied', 'reservation', scope_path, {
      scope = scope_path, unit = unit, deny_detail = dd, action = jdecode(ARGV[13]), subject = subject_json(),
      estimated_amount = E, observe_mode = 'OBSERVE', would_have_blocked_at = dd.blocked_by_scope,
    }, corr)
  else
    emit('reservation.denied', 'reservation', scope_path, {
      scope = scope_path, unit = unit, reason_code = reason, requested_amount = E,
      action = jdecode(ARGV[13]), subject = subject_json(), deny_detail = dd,
    }, corr)
  end
  local f = {'1', 'DENY', reason, '', '', unit, '', scope_path, '', '', ''}
  push_list(f, scopes)
  push_packed(f, {}, '')
  return dry_answer(finish(f, dd), reason)
end

-- 2. Tenant guard.
local conf, terr = tenant_conf(KEYS[2], ARGV[17] or '', ARGV[18] or 'side_effect')
if conf == nil then return fail('INTERNAL_ERROR', terr) end
if conf.status == 'CLOSED' then
  if dry then return deny('TENANT_CLOSED', scope_deny('TENANT_CLOSED', scopes[1], 'The tenant is closed')) end
  return fail('TENANT_CLOSED', 'tenant is closed')
end
if conf.status == 'SUSPENDED' then
  if dry then
    return deny('TENANT_SUSPENDED', scope_deny('TENANT_SUSPENDED', scopes[1], 'Reactivate the tenant'))
  end
  return fail('TENANT_SUSPENDED', 'tenant is suspended: no new reservations')
end
-- Effective observe mode: the request's, else the tenant's OBSERVE.
if req_observe == 'OBSERVE' or (req_observe == '' and conf.observe == 'OBSERVE') then
  observe, dry = true, true
end

-- 2b. The policy rate limit on reservations (lib/policy_rate.lua): a base
-- admission gate, so before the v0.1.26 steps and the budgets. A dry run or
-- an observed request reads the counter and answers DENY at the limit; only a
-- live reserve that creates its reservation counts (step 7).
local rate = policy_rate.gate(KEYS[1], 'r', conf.prr, scope_path, now)
if rate and rate.err then return fail('INTERNAL_ERROR', rate.err) end
if rate and rate.full then
  if dry then return deny('LIMIT_EXCEEDED', policy_rate.deny(rate)) end
  return policy_rate.refusal(rate)
end

-- 3. The tenant's policies matching the scope path, in their effective
-- window at Redis TIME (lib/policy.lua; nil when none matches), and their
-- v0.1.26 rules: access lists, risk-class quotas, per-kind quotas, in that
-- order and before any budget (lib/quota.lua).
local terms, perr = policy_terms(conf.pol, scope_path, now)
if perr then return fail('INTERNAL_ERROR', perr) end
local counts, refusal = quota_plan(terms, conf.pk, conf.pr,
  ARGV[17] or '', ARGV[18] or 'side_effect', ARGV[19] or '', ARGV[20] or '',
  scope_path, scopes[1], now, KEYS[1])
if refusal then
  if refusal.dd == nil then return fail(refusal.code, refusal.msg, {field = refusal.field}) end
  if dry then return deny(refusal.code, refusal.dd) end
  return fail(refusal.code, refusal.msg, {scope = refusal.dd.blocked_by_scope, deny_detail = cjson.encode(refusal.dd)})
end

-- 4. Budgets of every derived scope, canonical order; first failure wins.
local bs, berr = load_scopes(10, scopes)
if bs == nil then return fail('INTERNAL_ERROR', berr) end
-- E as a number when the int64 fast path applies (|x| < 10^15: every sum
-- below is exact in a double).
local En = (#E < 16) and (E + 0) or nil -- canonical digits: arithmetic converts once, tonumber() twice
for i = 1, #bs do
  local b = bs[i]
  local code = check_scope(b, E, En)
  if code then
    local dd = budget_deny(code, b, E, unit)
    if dry then return deny(code, dd) end
    return fail(code, CHECK_MSG[code] .. ' at ' .. b.path,
      {scope = b.path, remaining = b.rem, requested = E, unit = unit, deny_detail = cjson.encode(dd)})
  end
end
if #bs == 0 then
  local mismatch = unit_mismatch(KEYS[3], scopes, unit)
  if mismatch then return mismatch end
  if dry then
    return deny('BUDGET_NOT_FOUND', scope_deny('BUDGET_NOT_FOUND', scopes[#scopes],
      'Create a ' .. unit .. ' budget for ' .. scopes[#scopes] .. ' or one of its parents'))
  end
  return fail('NOT_FOUND', 'Budget not found for provided scope: ' .. scopes[#scopes], {scope = scopes[#scopes]})
end

-- 5. Caps come from the highest-priority matching policy that sets them,
-- else from the budget at the deepest derived scope (docs/protocol.md#policies).
local caps = nil
local deepest = bs[#bs]
if terms and terms.caps then
  caps = terms.caps
elseif deepest.path == scopes[#scopes] and deepest.caps then
  if jdecode(deepest.caps) == nil then
    return fail('INTERNAL_ERROR', 'budget ' .. deepest.path .. ' has malformed caps')
  end
  caps = deepest.caps
end
local decision = caps and 'ALLOW_WITH_CAPS' or 'ALLOW'

local policy = resolve_policy(ARGV[7], conf, terms and terms.overage)
if policy == nil then
  return fail('INVALID_REQUEST', 'the tenant default overage policy is invalid; set overage_policy explicitly', {field = 'overage_policy'})
end
local grace = small_int(ARGV[6])
if grace == nil then return fail('INVALID_REQUEST', 'grace_period_ms is invalid', {field = 'grace_period_ms'}) end
-- grace_s: the canonical string (ARGV[6] itself unless it has leading zeros).
local grace_s = ARGV[6]
if string.byte(grace_s, 1) == 48 and grace_s ~= '0' then grace_s = ms(grace) end

if dry then
  local bal = {}
  for _, b in ipairs(bs) do
    local n = #bal
    bal[n + 1], bal[n + 2], bal[n + 3], bal[n + 4] = b.path, b.rem, b.res, b.spent
    bal[n + 5], bal[n + 6], bal[n + 7], bal[n + 8] = b.alloc, b.debt, b.lim, b.over and '1' or '0'
  end
  local f = {'1', decision, '', '', E, unit, '', scope_path, grace_s, policy, caps or ''}
  push_list(f, scopes)
  push_bal(f, bal)
  if observe then
    emit('reservation.observed_allowed', 'reservation', scope_path, {
      scope = scope_path, decision = decision, unit = unit, action = jdecode(ARGV[13]), subject = subject_json(),
      estimated_amount = E, observe_mode = 'OBSERVE', caps_applied = caps and jdecode(caps) or nil,
    }, CORR.run(key_tenant(KEYS[1]), scope_path, ARGV[19] or ''))
  end
  return dry_answer(finish(f, nil), nil)
end

-- 6. Live: effective TTL (request, else the policy default, else the tenant
-- default; capped by the policy max, else the tenant max).
local ttl = (terms and terms.default_ttl) or conf.default_ttl
if ARGV[5] ~= '' then
  ttl = small_int(ARGV[5])
  if ttl == nil then return fail('INVALID_REQUEST', 'ttl_ms is invalid', {field = 'ttl_ms'}) end
end
local max_ttl = (terms and terms.max_ttl) or conf.max_ttl
if max_ttl > 0 and ttl > max_ttl then ttl = max_ttl end
local expires_at = now + ttl
-- Each time as a string once (a number->string conversion costs ~3k instructions).
local now_s, exp_s = ms(now), ms(expires_at)

-- Overflow pre-check of every increment before the first write. Fast path:
-- E, remaining and reserved below 10^15 in magnitude (canonical strings of
-- fewer than 16 characters), so the double arithmetic is exact and cannot
-- leave int64; check_scope left remaining as a number (b.rem_n).
-- ({nil, nil, nil}: the array part sized for the usual three scopes at once;
-- filled from 1 it grows by rehashing at 1, 2 and 4 entries otherwise.)
local new_res, new_rem = {nil, nil, nil}, {nil, nil, nil}
for i = 1, #bs do
  local b = bs[i]
  if b.rem_n and #b.res < 16 then
    local rem = b.rem_n - En
    b.exhausted = (b.rem_n > 0 and rem == 0)
    new_rem[i] = (rem == 0) and '0' or string.format('%d', rem)
    new_res[i] = string.format('%d', b.res + En)
  else
    new_res[i] = i64_add(b.res, E)
    new_rem[i] = i64_sub(b.rem, E)
    b.exhausted = (new_rem[i] == '0' and i64_cmp(b.rem, '0') > 0)
  end
  if new_res[i] == nil or new_rem[i] == nil then
    return fail('AMOUNT_OVERFLOW', 'reserving ' .. E .. ' would overflow int64 at ' .. b.path, {scope = b.path})
  end
end

-- 7. Mutate: count the quota counters, hold the estimate on every budgeted scope.
local qrun = counts and quota_count(counts, now, emit, KEYS[1]) or nil
if rate then policy_rate.count(rate) end
-- The balances go straight into their packed form (lib/ledger_snapshot.lua
-- pack_balances; row i is budgeted[i]) for the answer, and from the same
-- values into the record's rows rb<i> (lib/record_layout.lua compact_row).
local budgeted, rows, tail = {nil, nil, nil}, {nil, nil, nil}, {nil, nil, nil, nil, nil, nil, nil, nil} -- presized
for i = 1, #bs do
  local b = bs[i]
  write_budget(b, new_rem[i], new_res[i])
  budgeted[i] = b.path
  rows[i] = (ROW_INDEX[i] or ms(i)) .. ',' .. new_rem[i] .. ',' .. new_res[i] .. ',' .. b.spent .. ',' .. b.alloc
    .. ',' .. b.debt .. ',' .. b.lim .. (b.over and ',1' or ',0')
  if i <= BALANCE_ROW_MAX then
    tail[2 * i - 1], tail[2 * i] = ROW_FIELD.rb[i], compact_row(new_rem[i], new_res[i], b.spent, b.alloc, b.debt, b.lim, b.over)
  end
  if b.exhausted then
    emit('budget.exhausted', 'budget', b.path, {
      scope = b.path, unit = unit, threshold = 1, direction = 'rising', remaining = '0',
      allocated = b.alloc, spent = b.spent, reserved = new_res[i],
    })
  end
end

local rbal = table.concat(rows, ';')

-- 8. The record, its indexes and the idempotency mapping. The record keeps
-- what the answer is rebuilt from in the compact layout of
-- docs/design.md#reservation-records (lua/lib/record_layout.lua): budgeted
-- scopes as positions in the scope path, one balance row per scope (rb<i>,
-- the same values as the answer's packed rows), caps and metadata only when
-- present, the subject and affected scopes only when the scope path does not
-- imply them; no id or tenant field (the key names both).
-- With ARGV[11] '' the scopes are the scope path's prefixes, so the budgets'
-- positions in them are the compact `budgeted` as is (no prefixes derived).
local prefixes, budgeted_v = nil, nil
if ARGV[11] == '' and #scopes <= 9 then
  if #bs == #scopes then
    budgeted_v = string.sub('123456789', 1, #bs)
  else
    local pos = {}
    for i, b in ipairs(bs) do pos[i] = ROW_INDEX[b.pos] end
    budgeted_v = table.concat(pos)
  end
else
  prefixes = scope_prefixes(scope_path)
  budgeted_v = pack_budgeted(budgeted, prefixes)
end
-- tail: the balance rows (above), then the optional fields, only when set
-- (an absent field reads as empty).
local n = #tail
if ARGV[12] ~= '' then tail[n + 1], tail[n + 2] = 'subject', ARGV[12]; n = n + 2 end
if ARGV[14] ~= '' then tail[n + 1], tail[n + 2] = 'metadata', ARGV[14]; n = n + 2 end
if caps then tail[n + 1], tail[n + 2] = 'caps', caps; n = n + 2 end
if qrun and #qrun > 0 then tail[n + 1], tail[n + 2] = 'qrun', cjson.encode(qrun); n = n + 2 end
-- explicit: the affected scopes are not the scope path's prefixes (stored, and
-- sent in the answer; otherwise both leave them to be derived).
local explicit = prefixes ~= nil and ARGV[11] ~= '' and not same_list(scopes, prefixes)
if explicit then tail[n + 1], tail[n + 2] = 'affected', ARGV[11] end
redis.call('HSET', KEYS[4], 'state', 'ACTIVE', 'unit', unit, 'estimate', E,
  'scope_path', scope_path, 'budgeted', budgeted_v,
  'created_at', now_s, 'expires_at', exp_s, 'grace_ms', grace_s, 'policy', policy,
  'max_ext', (terms and terms.max_ext) and ms(terms.max_ext) or conf.max_ext_s, 'idem_key', idem_key, 'action', ARGV[13], unpack(tail))
redis.call('ZADD', KEYS[5], ms(expires_at + grace), rid)
redis.call('ZADD', KEYS[6], now_s, rid)
redis.call('ZADD', KEYS[7], exp_s, rid)
-- The idempotency TTL is a day unless the reservation outlives it: that
-- day as a literal, not converted again (ms(DAY_MS); each number->string
-- conversion costs ~3k instructions). No new local here: gopher-lua's
-- register limit is reached in this body.
idem_put(KEYS[8], hash, (ttl + grace > DAY_MS) and ms(ttl + grace) or '86400000', nil, rid, rid_prefix)

-- Bounded trim of the listing indexes: the oldest entries whose record is
-- gone (its retention ended: 30 days, or with an archive the hot window,
-- whose TTL starts only once PostgreSQL holds the record; a record still
-- waiting for the archive has no TTL and keeps its entries). Oldest first
-- by creation, stopping at the first record that still exists.
-- Amortised: only a reserve whose id ends in hex digit 0 or 8 trims (one in
-- eight: the id's last digit is a random UUIDv4 digit the server chose, so
-- no caller can steer it), and it removes up to 32 entries, four per
-- reserve on average against the one a reserve adds; the other seven skip
-- the two calls (ZRANGE + EXISTS, ~16k instructions) that usually find
-- nothing (BENCHMARKS.md, issue 22).
-- (A block: gopher-lua's register limit leaves no room for a new
-- top-level local in this body.)
do
  local d = string.byte(rid, -1)
  if d == 48 or d == 56 then
    local old, gone = redis.call('ZRANGE', KEYS[6], 0, 31), {}
    for i = 1, #old do
      if redis.call('EXISTS', key_reservation(KEYS[1], old[i])) == 1 then break end
      gone[i] = old[i]
    end
    if #gone > 0 then
      redis.call('ZREM', KEYS[6], unpack(gone))
      redis.call('ZREM', KEYS[7], unpack(gone))
    end
  end
end

-- The trailing nils size the answer for what reserve_reply appends (three
-- budgeted scopes: 24 elements), so it is not rehashed as it grows.
-- The remaining TTL is the request's ttl_ms as sent when it was neither
-- capped nor written with leading zeros (one string->number conversion to
-- tell, ~1k, instead of a number->string one, ~3k).
local ttl_arg = ARGV[5] ~= '' and string.byte(ARGV[5], 1) ~= 48 and ttl == ARGV[5] + 0
return okf(reserve_reply({'OK', FLAT_V, '', '', 0, ttl_arg and ARGV[5] or ms(ttl), '', nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil,
  nil, nil, nil, nil, nil, nil}, rid, E, unit, exp_s, scope_path, explicit and scopes or nil, caps, budgeted, rbal,
  grace_s, policy))
