#!lua flags=allow-oom
-- ledger/commit: settle a reservation with its actual cost (docs/protocol.md#commit).
-- include: lib/ledger_util.lua lib/ledger_tenant.lua lib/ledger_budget.lua lib/ledger_settle.lua lib/ledger_reservation.lua lib/ledger_snapshot.lua lib/scope_filter.lua lib/policy_rate.lua
--
-- KEYS: 1 tenant_prefix
--       2 tenant_record
--       3 reservation       the reservation hash
--       4 deadlines         the deadline index
--       5 event_stream
--                           Budget hashes are derived from the record's budgeted
--                           scopes and unit as KEYS[1] .. 'b:' .. scope .. ':' ..
--                           unit (same slot).
-- ARGV: 1 reservation_id
--       2 unit              the actual's unit
--       3 amount            the actual amount (decimal)
--       4 idempotency_key
--       5 payload_hash
--       6 metrics           JSON or ''
--       7 metadata          JSON or ''
--       8 event_ctx         event context
--       9 archive           '1' when an archive is configured (the settled record
--                           joins the tenant's archive queue instead of getting
--                           its TTL; see finalize in lib/ledger_reservation.lua),
--                           else '' or absent
--       10 scope_filter     of the caller's API key (scopefilter.ScriptArg; ''
--                           none): a reservation outside it is refused before
--                           anything else, replays included
--       11.. archived_pairs an archived record's field/value pairs (at most 128
--                           pairs), only when internal/ledger found the hash gone
--                           and the reservation in the PostgreSQL archive: read
--                           only when the hash does not exist; the script then
--                           answers a replay from them, or refuses exactly as for
--                           the settled hash, and writes nothing.
-- Result: okf({'OK', FLAT_V, '', '', replay (0|1), overage ('<A-E or 0>'),
--             debt ('<debt incurred>'), <commit snapshot fields>})
--   (lib/ledger_snapshot.lua), rebuilt on replay from the record (charged,
--   debt_incurred, balance rows cb<i> packed again).
-- Refusals: INVALID_REQUEST, NOT_FOUND, FORBIDDEN (scope_filter), IDEMPOTENCY_MISMATCH, TENANT_CLOSED,
--   RESERVATION_EXPIRED, RESERVATION_FINALIZED, UNIT_MISMATCH, LIMIT_EXCEEDED
--   (rate_limits.max_commits_per_minute of the policy matching the
--   reservation's scope path; lib/policy_rate.lua), BUDGET_EXCEEDED,
--   OVERDRAFT_LIMIT_EXCEEDED, AMOUNT_OVERFLOW, INTERNAL_ERROR.

local now = now_ms()
local rid, unit = ARGV[1], ARGV[2]
local A, bad_amount = amount_arg(ARGV[3], 'actual.amount')
if not A then return bad_amount end
local idem_key, hash = ARGV[4], ARGV[5]

-- The record fields commit reads (HMGET, not HGETALL: the record also holds
-- the subject, action, metadata and the reserve's balances, none needed
-- here). A listpack-encoded record is searched field by field, an absent
-- field costing a full scan, so the fields only a committed record has are
-- read only when it is committed.
-- The fields are named in the call and r is built by one constructor (sized
-- once): no unpack, no loop, no rehash as it grows key by key.
local v = redis.call('HMGET', KEYS[3], 'state', 'unit', 'estimate', 'budgeted', 'expires_at', 'grace_ms', 'policy',
  'scope_path')
-- The false slots are the keys load_reservation adds, so the table is sized
-- for them at once.
local r = {state = v[1] or nil, unit = v[2] or nil, estimate = v[3] or nil, budgeted = v[4] or nil,
  expires_at = v[5] or nil, grace_ms = v[6] or nil, policy = v[7] or nil, scope_path = v[8] or nil,
  prc = false, n_expires = false, n_grace = false, E = false, scopes = false}
local af
if not (v[1] or v[2] or v[3] or v[4] or v[5] or v[6] or v[7] or v[8]) and redis.call('EXISTS', KEYS[3]) == 0 then
  af = archived_fields(11)
  if af == nil then return fail('NOT_FOUND', 'reservation ' .. rid .. ' not found') end
  for _, name in ipairs({'state', 'unit', 'estimate', 'budgeted', 'expires_at', 'grace_ms', 'policy', 'scope_path'}) do
    r[name] = af[name]
  end
end
local denied = scope_filter_refusal(ARGV[10], r.scope_path)
if denied then return denied end
if r.state == 'COMMITTED' then
  local COMMITTED_READ = {'commit_key', 'commit_hash', 'charged', 'debt_incurred'}
  if af then
    for _, name in ipairs(COMMITTED_READ) do r[name] = af[name] end
  else
    v = redis.call('HMGET', KEYS[3], unpack(COMMITTED_READ))
    for i = 1, #COMMITTED_READ do
      if v[i] then r[COMMITTED_READ[i]] = v[i] end
    end
  end
end

-- Replay: same key on a committed reservation.
if r.state == 'COMMITTED' and r.commit_key == idem_key then
  if r.commit_hash ~= hash then
    return fail('IDEMPOTENCY_MISMATCH', 'idempotency key was used with a different commit')
  end
  local out = {'OK', FLAT_V, '', '', 1, '0', '0'}
  local E, budgeted = i64_norm(r.estimate or ''), unpack_budgeted(r.budgeted, r.scope_path) or {}
  local packed
  if af then
    budgeted, packed = record_replay().packed_rows(af, 'cb', budgeted, false)
  else
    budgeted, packed = record_replay().read_rows(KEYS[3], 'cb', budgeted)
  end
  if E == nil or packed == nil or r.charged == nil then
    return fail('INTERNAL_ERROR', 'commit replay unavailable: the reservation record is corrupt')
  end
  return okf(commit_reply(out, r.unit, r.charged, budgeted, packed, r.debt_incurred or '0', E))
end

local code, msg
r, code, msg = load_reservation(r, KEYS[2])
if r == nil then return fail(code, msg) end
if af then return fail('INTERNAL_ERROR', 'archived reservation ' .. rid .. ' is not settled') end
if not POLICIES[r.policy or ''] then return fail('INTERNAL_ERROR', 'reservation has an invalid overage policy') end
if unit ~= r.unit then
  return fail('UNIT_MISMATCH', 'actual.unit must be ' .. r.unit, {requested_unit = unit, expected_units = r.unit})
end
if now > r.n_expires + r.n_grace then
  return fail('RESERVATION_EXPIRED', 'reservation expired at ' .. r.expires_at .. ' (+' .. r.grace_ms .. ' ms grace)')
end

-- The policy rate limit on commits (lib/policy_rate.lua), at the
-- reservation's scope path: after the checks that make this a valid commit of
-- a live reservation, before the settlement; a commit that settles counts in
-- this run, a refused one writes nothing.
local rate = policy_rate.gate(KEYS[1], 'c', r.prc, r.scope_path, now)
if rate and rate.err then return fail('INTERNAL_ERROR', rate.err) end
if rate and rate.full then return policy_rate.refusal(rate) end

local bs, berr = reservation_budgets(KEYS[1], r)
if bs == nil then return fail('INTERNAL_ERROR', berr) end
local plan, pcode, pmsg, pdet = settle(bs, r.E, A, r.policy)
if plan == nil then return fail(pcode, pmsg, pdet) end

apply_plan(plan)
if rate then policy_rate.count(rate) end

-- The emitter decodes the event context; most commits emit nothing, so it
-- is built on the first event only.
local emitter = nil
local function emit(...)
  if emitter == nil then emitter = event_emitter(KEYS[5], ARGV[8], now) end
  return emitter(...)
end
local overage = '0'
if plan.delta ~= '0' and string.byte(plan.delta, 1) ~= 45 then -- canonical: > 0 without a conversion
  overage = plan.delta
  emit('reservation.commit_overage', 'reservation', r.scope_path, {
    reservation_id = rid, scope = r.scope_path, unit = unit, estimated_amount = r.E,
    actual_amount = A, overage = plan.delta, overage_policy = r.policy, debt_incurred = plan.debt_total,
  })
end
emit_transitions(emit, unit, plan, rid, r.policy)

-- (The trailing nils size the array for the three balance rows appended below.)
local fields = {'state', 'COMMITTED', 'charged', plan.charged,
  'finalized_at', ms(now), 'commit_key', idem_key, 'commit_hash', hash, nil, nil, nil, nil, nil, nil}
-- The answer's packed rows and the record's balance rows cb<i>
-- (docs/design.md#reservation-records) from the same values; row i is
-- r.scopes[i].
local rows, j = {nil, nil, nil}, 1 -- presized for three scopes (lib/ledger_settle.lua)
for k = 1, #plan.rows do
  local row = plan.rows[k]
  local b = row.b
  while r.scopes[j] ~= nil and r.scopes[j] ~= b.path do j = j + 1 end
  local idx = r.scopes[j] and j or 0
  rows[k] = (ROW_INDEX[idx] or ms(idx)) .. ',' .. row.rem .. ',' .. row.res .. ',' .. row.spent .. ',' .. b.alloc
    .. ',' .. row.debt .. ',' .. b.lim .. (row.over and ',1' or ',0')
  if idx > 0 and idx <= BALANCE_ROW_MAX then
    fields[#fields + 1] = ROW_FIELD.cb[idx]
    fields[#fields + 1] = compact_row(row.rem, row.res, row.spent, b.alloc, row.debt, b.lim, row.over)
    j = j + 1
  end
end
local cbal = table.concat(rows, ';')
-- Optional fields only when set (an absent field reads as empty; debt_incurred as 0).
if plan.debt_total ~= '0' then fields[#fields + 1] = 'debt_incurred'; fields[#fields + 1] = plan.debt_total end
if ARGV[7] ~= '' then fields[#fields + 1] = 'committed_metadata'; fields[#fields + 1] = ARGV[7] end
if ARGV[6] ~= '' then fields[#fields + 1] = 'metrics'; fields[#fields + 1] = ARGV[6] end
redis.call('HSET', KEYS[3], unpack(fields))
finalize(KEYS[1], KEYS[3], KEYS[4], rid, ARGV[9])

-- The trailing nils size the answer for what commit_reply appends (three
-- budgeted scopes: 16 elements), so it is not rehashed as it grows.
return okf(commit_reply({'OK', FLAT_V, '', '', 0, overage, plan.debt_total, nil, nil, nil, nil, nil, nil, nil, nil, nil},
  unit, plan.charged, r.scopes, cbal, plan.debt_total, r.E))
