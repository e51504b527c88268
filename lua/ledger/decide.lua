-- ledger/decide: evaluate a reservation without making one (docs/protocol.md#dry-run-and-decide).
-- include: lib/ledger_util.lua lib/idem.lua lib/ledger_tenant.lua lib/ledger_budget.lua lib/ledger_check.lua lib/ledger_snapshot.lua lib/policy.lua lib/quota.lua
-- Budget and tenant conditions are DENY results, never errors; only a budget
-- that exists solely in another unit (UNIT_MISMATCH), a malformed tenant
-- record and an idempotency mismatch are errors. Writes only the idempotency
-- record and, on DENY, a reservation.denied event.
--
-- KEYS: 1 tenant_prefix
--       2 tenant_record
--       3 budget_index
--       4 idem_record       idempotency record (endpoint "decide")
--       5 event_stream
--       6.. budgets         budget hash of each affected scope in the request
--                           unit, canonical order
-- ARGV: 1 unit
--       2 estimate          decimal
--       3 idempotency_key
--       4 payload_hash
--       5 scope_path
--       6 affected          affected scopes (JSON array; '' = the scope path's prefixes)
--       7 subject           JSON
--       8 action            JSON
--       9 event_ctx         event context
--       10 action_kind
--       11 risk_class       the kind's ('' = an undeclared custom.* kind)
--       12 run_id           Subject.dimensions.run_id ('' = none)
--       13 policy_keys      the keys quota allowlists may match (as ledger/reserve's ARGV 20)
-- Result: okf({'OK', FLAT_V, '', '', replay (0|1), denied (<reason> or ''), <decide snapshot fields>})
--   (lib/ledger_snapshot.lua), from the snapshot the idempotency record keeps
--   as JSON (`resp`: {decision, reason_code?, caps?, affected, deny_detail?}).
-- The reservation rate limit (lib/policy_rate.lua), then the v0.1.26 access
-- lists and quotas (lib/quota.lua) are evaluated before the budgets, as in
-- ledger/reserve; decide reads counters, never counts.
-- Decide ignores observe mode: it never enforces, so it has nothing to observe.

local now = now_ms()
local unit = ARGV[1]
local E, bad_amount = amount_arg(ARGV[2], 'estimate.amount')
if not E then return bad_amount end
local hash, scope_path = ARGV[4], ARGV[5]
local scopes = affected_arg(ARGV[6], scope_path)
if scopes == nil or #scopes == 0 or #scopes ~= #KEYS - 5 then
  return fail('INTERNAL_ERROR', 'decide: affected scopes do not match the budget keys')
end

local rec, refusal = idem_check(KEYS[4], hash, 'idempotency key was used with a different request')
if refusal then return refusal end
if rec then
  local old = jdecode(rec.resp)
  if old == nil then return fail('INTERNAL_ERROR', 'idempotency record is corrupt') end
  return okf(decide_reply_of({'OK', FLAT_V, '', '', 1, ''}, old))
end

local function answer(snap_tbl, reason)
  local snap = cjson.encode(snap_tbl)
  if reason then
    local emit = event_emitter(KEYS[5], ARGV[9], now)
    -- REF: decide denials are attributed to the tenant-level scope.
    emit('reservation.denied', 'reservation', scopes[1], {
      scope = scopes[1], unit = unit, reason_code = reason, requested_amount = E,
      action = jdecode(ARGV[8]), subject = jdecode(ARGV[7]), deny_detail = snap_tbl.deny_detail,
    }, CORR.deny(key_tenant(KEYS[1]), scopes[1], ARGV[10] or '', snap_tbl.deny_detail))
  end
  idem_put(KEYS[4], hash, ms(DAY_MS), snap)
  return okf(decide_reply_of({'OK', FLAT_V, '', '', 0, reason or ''}, snap_tbl))
end

-- deny answers DENY with its DenyDetail dd (v0.1.26; kept in the record).
local function deny(reason, dd)
  return answer({decision = 'DENY', reason_code = reason, affected = scopes, deny_detail = dd}, reason)
end

local conf, terr = tenant_conf(KEYS[2], ARGV[10] or '', ARGV[11] or 'side_effect')
if conf == nil then return fail('INTERNAL_ERROR', terr) end
if conf.status == 'CLOSED' then return deny('TENANT_CLOSED', scope_deny('TENANT_CLOSED', scopes[1], 'The tenant is closed')) end
if conf.status == 'SUSPENDED' then
  return deny('TENANT_SUSPENDED', scope_deny('TENANT_SUSPENDED', scopes[1], 'Reactivate the tenant'))
end

-- The reservation rate limit (lib/policy_rate.lua), as in ledger/reserve:
-- DENY at the limit; decide reads the counter, never counts.
local rate = policy_rate.gate(KEYS[1], 'r', conf.prr, scope_path, now)
if rate and rate.err then return fail('INTERNAL_ERROR', rate.err) end
if rate and rate.full then return deny('LIMIT_EXCEEDED', policy_rate.deny(rate)) end

local terms, perr = policy_terms(conf.pol, scope_path, now)
if perr then return fail('INTERNAL_ERROR', perr) end
local _, refusal = quota_plan(terms, conf.pk, conf.pr,
  ARGV[10] or '', ARGV[11] or 'side_effect', ARGV[12] or '', ARGV[13] or '',
  scope_path, scopes[1], now, KEYS[1])
if refusal then
  if refusal.dd == nil then return fail(refusal.code, refusal.msg, {field = refusal.field}) end
  return deny(refusal.code, refusal.dd)
end

local bs, berr = load_scopes(6, scopes)
if bs == nil then return fail('INTERNAL_ERROR', berr) end
for _, b in ipairs(bs) do
  local code = check_scope(b, E)
  if code then return deny(code, budget_deny(code, b, E, unit)) end
end
if #bs == 0 then
  local mismatch = unit_mismatch(KEYS[3], scopes, unit)
  if mismatch then return mismatch end
  return deny('BUDGET_NOT_FOUND', scope_deny('BUDGET_NOT_FOUND', scopes[#scopes],
    'Create a ' .. unit .. ' budget for ' .. scopes[#scopes] .. ' or one of its parents'))
end

-- Caps: the highest-priority matching policy's, else the deepest budget's
-- (docs/protocol.md#policies), as in ledger/reserve.
if terms and terms.caps then
  return answer({decision = 'ALLOW_WITH_CAPS', caps = terms.caps, affected = scopes}, nil)
end
local deepest = bs[#bs]
if deepest.path == scopes[#scopes] and deepest.caps then
  if jdecode(deepest.caps) == nil then
    return fail('INTERNAL_ERROR', 'budget ' .. deepest.path .. ' has malformed caps')
  end
  return answer({decision = 'ALLOW_WITH_CAPS', caps = deepest.caps, affected = scopes}, nil)
end
return answer({decision = 'ALLOW', affected = scopes}, nil)
