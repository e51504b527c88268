-- ledger/event: debit an actual cost directly, without a reservation
-- include: lib/ledger_util.lua lib/idem.lua lib/ledger_tenant.lua lib/ledger_budget.lua lib/ledger_check.lua lib/ledger_settle.lua lib/ledger_snapshot.lua lib/keys.lua lib/policy.lua
-- (docs/protocol.md#direct-debits-createevent). Never blocked by is_over_limit or outstanding debt: only
-- by tenant status, budget status and its own overage policy.
--
-- KEYS: 1 tenant_prefix
--       2 tenant_record
--       3 budget_index
--       4 event_record
--       5 idem_record       idempotency record (endpoint "event")
--       6 event_stream
--       7.. budgets         budget hash of each affected scope in the request
--                           unit, canonical order
-- ARGV: 1 event_id
--       2 unit
--       3 amount            the actual (decimal)
--       4 overage_policy    '' = tenant default
--       5 idempotency_key
--       6 payload_hash
--       7 scope_path
--       8 affected          affected scopes (JSON array; '' = the scope path's prefixes)
--       9 subject           JSON
--       10 action           JSON
--       11 metrics          JSON or ''
--       12 metadata         JSON or ''
--       13 client_time_ms   advisory, stored only, never used as a clock
--       14 event_ctx        event context
-- Result: okf({'OK', FLAT_V, '', '', replay (0|1), debt ('<debt incurred>'), <event snapshot fields>})
--   (lib/ledger_snapshot.lua), from the snapshot the event record keeps as
--   JSON (`resp`: {status = 'APPLIED', event_id, unit, charged? (only when
--   capped below actual), balances, debt_incurred}).
-- Refusals: INVALID_REQUEST, IDEMPOTENCY_MISMATCH, TENANT_CLOSED, TENANT_SUSPENDED,
--   BUDGET_FROZEN, BUDGET_CLOSED, BUDGET_EXCEEDED, OVERDRAFT_LIMIT_EXCEEDED,
--   UNIT_MISMATCH, NOT_FOUND, AMOUNT_OVERFLOW, INTERNAL_ERROR.

local now = now_ms()
local eid, unit = ARGV[1], ARGV[2]
local A, bad_amount = amount_arg(ARGV[3], 'actual.amount')
if not A then return bad_amount end
local idem_key, hash, scope_path = ARGV[5], ARGV[6], ARGV[7]
local scopes = affected_arg(ARGV[8], scope_path)
if scopes == nil or #scopes == 0 or #scopes ~= #KEYS - 6 then
  return fail('INTERNAL_ERROR', 'event: affected scopes do not match the budget keys')
end

local rec, refusal = idem_check(KEYS[5], hash, 'idempotency key was used with a different event')
if refusal then return refusal end
if rec then
  local resp = redis.call('HGET', key_event(KEYS[1], rec.id or ''), 'resp')
  if not resp then return fail('INTERNAL_ERROR', 'replay unavailable for this idempotency key; the event record is gone') end
  local old = jdecode(resp)
  if old == nil then return fail('INTERNAL_ERROR', 'event replay unavailable: the event record is corrupt') end
  return okf(event_reply_of({'OK', FLAT_V, '', '', 1, '0'}, old))
end

local conf, terr = tenant_conf(KEYS[2])
if conf == nil then return fail('INTERNAL_ERROR', terr) end
if conf.status == 'CLOSED' then return fail('TENANT_CLOSED', 'tenant is closed') end
if conf.status == 'SUSPENDED' then return fail('TENANT_SUSPENDED', 'tenant is suspended: no new spending') end
-- The overage policy: request, else the matching scope policy's
-- (docs/protocol.md#policies), else the tenant default.
local terms, perr = policy_terms(conf.pol, scope_path, now)
if perr then return fail('INTERNAL_ERROR', perr) end
local policy = resolve_policy(ARGV[4], conf, terms and terms.overage)
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
  local mismatch = unit_mismatch(KEYS[3], scopes, unit)
  if mismatch then return mismatch end
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

redis.call('HSET', KEYS[4], 'id', eid, 'tenant', key_tenant(KEYS[1]), 'unit', unit, 'actual', A,
  'charged', plan.charged, 'debt_incurred', plan.debt_total, 'policy', policy, 'scope_path', scope_path,
  'affected', ARGV[8] ~= '' and ARGV[8] or cjson.encode(scopes), 'budgeted', cjson.encode(budgeted), 'subject', ARGV[9], 'action', ARGV[10],
  'metrics', ARGV[11], 'metadata', ARGV[12], 'client_time_ms', ARGV[13], 'created_at', ms(now),
  'idem_key', idem_key, 'hash', hash, 'resp', snap)
redis.call('PEXPIRE', KEYS[4], RETENTION_MS)
idem_put(KEYS[5], hash, ms(7 * DAY_MS), nil, eid)

return okf(event_reply_of({'OK', FLAT_V, '', '', 0, plan.debt_total}, resp))
