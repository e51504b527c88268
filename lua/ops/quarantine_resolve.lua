-- ops/quarantine_resolve: settle one quarantined reservation, atomically and
-- idempotently (OpsService.ResolveQuarantined).
-- include: lib/ops_hold.lua lib/ops_idem.lua lib/refund.lua lib/audit.lua
--
-- Audit: on success, the call's audit entry in the same run (lib/audit.lua).
-- KEYS: 1 tenant_prefix    "cy:{t:<tenant>}:"; the record, indexes and budget
--                          hashes are derived from it
--       2 idem_record      cy:{t:<tenant>}:idem:resolve:<key>
--       3 event_stream     cy:{t:<tenant>}:events
-- ARGV: 1 reservation_id
--       2 outcome          'release' | 'expire' | 'requeue'
--       3 resolution       JSON arguments: release {amounts = [{scope, amount}]}
--                          (amounts as decimal strings); requeue {estimate, unit,
--                          budgeted = [..], expires_at, grace_ms} (each optional;
--                          strings); expire {}
--       4 reason           the operator's reason
--       5 payload_hash
--       6 idem_lifetime_ms
--       7 event_ctx        event context (internal/eventctx.Arg)
--       8 archive          '1' when an archive is configured ('' or absent: not):
--                          a released or expired record joins the tenant's archive
--                          queue (key_archive_queue) instead of getting its 30-day
--                          TTL; the archiver sets it once archived
-- Result {"replay":bool,"resp":...}: the outcome, the record's row (lib/ops_hold.lua
-- quarantine_row) and the touched budgets' fields after the change.
-- JSON ops/quarantine_resolve: replay resp{outcome
--   row{id reason at fields holds[]{scope unit amount reserved}} budgets[]{scope unit f}}
-- Refusals, all before the first write: IDEMPOTENCY_MISMATCH, NOT_FOUND (no
--   record), INVALID_STATE (not quarantined, or already settled), BUDGET_NOT_FOUND,
--   INVALID_REQUEST (an amount above the budget's reserved, a scope the record
--   does not hold, a requeue the sweeper could not expire exactly),
--   AMOUNT_OVERFLOW, INTERNAL_ERROR (a malformed budget).
-- Writes:
--   release  per budget reserved -= a, remaining += a (the identity
--            remaining = allocated - spent - reserved - debt is kept);
--            state RELEASED, finalized_at, release_reason
--   expire   state EXPIRED, expired_at; no budget is touched
--   requeue  corrected fields, state ACTIVE, quarantine flag removed, ZADD deadline index
--   release/expire: ZREM from both indexes, PEXPIRE 30 d (archive: XADD to the
--            archive queue instead); every outcome: ZREM
--   quarantine index, quarantine_resolution on the record, one
--   reservation.quarantine_resolved event (actor from the context: admin).

local prefix, idem_key, stream = KEYS[1], KEYS[2], KEYS[3]
local id, outcome = ARGV[1], ARGV[2]
local dl, qi = key_index(prefix, 'deadline'), key_index(prefix, 'quarantine')

local replay = ops_replay(idem_key, ARGV[5])
if replay then return replay end

local oka, args = pcall(cjson.decode, ARGV[3])
if not oka or type(args) ~= 'table' then return fail('INVALID_REQUEST', 'malformed resolution arguments') end
local ttl = tonumber(ARGV[6])
if not ttl or ttl < 1 then return fail('INVALID_REQUEST', 'idempotency lifetime must be positive') end

local h = read_hold(prefix, id)
if h.missing or h.wrong_type then
  return fail('NOT_FOUND', 'reservation ' .. id .. ' not found', {field = 'reservation_id'})
end
if not is_quarantined(h) then
  return fail('INVALID_STATE', 'reservation ' .. id .. ' is not quarantined (or already settled)',
    {field = 'reservation_id', state = h.state or '', quarantined = tostring(h.quarantined_at ~= nil)})
end
parse_hold(h)
local now = now_ms()
local ts = string.format('%.0f', now)

-- budget reads one budget of the record's unit for a check or a write.
local function budget(scope, unit)
  local key = key_budget(prefix, scope, unit)
  local b, problem = refund_read(key)
  if problem == 'WRONG_TYPE' then return nil, fail('INTERNAL_ERROR', 'budget ' .. scope .. ' is not a hash') end
  if problem == 'MISSING' then
    return nil, fail('BUDGET_NOT_FOUND', 'budget ' .. scope .. ' ' .. unit .. ' not found', {scope = scope, unit = unit})
  end
  if problem then
    return nil, fail('INTERNAL_ERROR', 'budget ' .. scope .. ' ' .. unit .. ' has a malformed balance; repair it first',
      {scope = scope, unit = unit})
  end
  b.scope, b.unit = scope, unit
  return b
end

local touched = {}
local data = {reservation_id = id, outcome = '', quarantine_reason = h.quarantine_reason or '', reason = ARGV[4]}

if outcome == 'release' then
  if not h.unit_ok then
    return fail('INVALID_REQUEST', 'the record has no valid unit; requeue it with a corrected unit first', {field = 'reservation_id'})
  end
  local allowed = nil
  if h.scopes then
    allowed = {}
    for _, s in ipairs(h.scopes) do allowed[s] = true end
  end
  local amounts = args.amounts
  if type(amounts) ~= 'table' then amounts = {} end
  local steps, seen, released = {}, {}, {}
  for i, a in ipairs(amounts) do
    local field = 'release.amounts[' .. (i - 1) .. ']'
    if type(a) ~= 'table' or type(a.scope) ~= 'string' or seen[a.scope] then
      return fail('INVALID_REQUEST', 'each scope may appear once', {field = field .. '.scope_path'})
    end
    seen[a.scope] = true
    if allowed and not allowed[a.scope] then
      return fail('INVALID_REQUEST', 'the reservation does not hold ' .. a.scope, {field = field .. '.scope_path', budgeted = h.scopes and cjson.encode(h.scopes) or h.budgeted})
    end
    local amt = i64_norm(tostring(a.amount))
    if amt == nil or i64_cmp(amt, '0') < 0 then
      return fail('INVALID_REQUEST', 'amount must be an int64 >= 0', {field = field .. '.amount'})
    end
    local b, refusal = budget(a.scope, h.unit)
    if b == nil then return refusal end
    local _, problem = refund_step(b, amt, true)
    if problem == 'RESERVED_UNDERFLOW' then
      return fail('INVALID_REQUEST', 'amount exceeds the reserved of ' .. a.scope .. '; releasing it would make reserved negative',
        {field = field .. '.amount', reserved = b.res, requested = amt})
    elseif problem then
      return fail('AMOUNT_OVERFLOW', 'releasing would overflow int64 at ' .. a.scope, {field = field .. '.amount'})
    end
    steps[#steps + 1] = b
    touched[#touched + 1] = b
    released[#released + 1] = {scope = a.scope, amount = amt}
  end
  refund_apply(steps)
  redis.call('HSET', h.key, 'state', 'RELEASED', 'finalized_at', ts, 'release_reason', 'operator: ' .. ARGV[4],
    'quarantine_resolution', 'RELEASED')
  data.outcome = 'RELEASED'
  data.released = released
elseif outcome == 'expire' then
  redis.call('HSET', h.key, 'state', 'EXPIRED', 'expired_at', ts, 'quarantine_resolution', 'EXPIRED')
  data.outcome = 'EXPIRED'
elseif outcome == 'requeue' then
  local set = {}
  local corrected = {}
  local function correct(field, v)
    if v ~= nil and v ~= cjson.null then
      h[field] = tostring(v)
      set[#set + 1] = field
      set[#set + 1] = h[field]
      corrected[field] = h[field]
    end
  end
  correct('estimate', args.estimate)
  correct('unit', args.unit)
  if type(args.budgeted) == 'table' and #args.budgeted > 0 then correct('budgeted', cjson.encode(args.budgeted)) end
  correct('expires_at', args.expires_at)
  correct('grace_ms', args.grace_ms)
  local hold_problem, expiry_problem = parse_hold(h)
  if hold_problem or expiry_problem then
    return fail('INVALID_REQUEST', 'the sweeper could not expire the corrected record: ' .. (hold_problem or expiry_problem),
      {field = 'requeue', reason = hold_problem or expiry_problem})
  end
  for _, s in ipairs(h.scopes) do
    local b, refusal = budget(s, h.unit)
    if b == nil then return refusal end
    if i64_cmp(b.res, h.E) < 0 then
      return fail('INVALID_REQUEST', 'budget ' .. s .. ' reserves less than the estimate; release or expire instead',
        {field = 'requeue', scope = s, reserved = b.res, estimate = h.E})
    end
    touched[#touched + 1] = b
  end
  -- Requeued means ACTIVE again (this also settles an INVALID_STATE quarantine).
  set[#set + 1] = 'state'
  set[#set + 1] = 'ACTIVE'
  redis.call('HSET', h.key, unpack(set))
  redis.call('HDEL', h.key, 'quarantined_at', 'quarantine_reason')
  redis.call('HSET', h.key, 'quarantine_resolution', 'REQUEUED')
  redis.call('ZADD', dl, string.format('%.0f', h.deadline), id)
  data.outcome = 'REQUEUED'
  data.corrected = corrected
else
  return fail('INVALID_REQUEST', 'outcome must be release, expire or requeue', {field = 'outcome'})
end

redis.call('ZREM', qi, id)
if outcome ~= 'requeue' then
  redis.call('ZREM', dl, id)
  if ARGV[8] == '1' then
    redis.call('XADD', key_archive_queue(prefix), '*', 'id', id)
  else
    redis.call('PEXPIRE', h.key, string.format('%.0f', HOLD_RETENTION_MS))
  end
end

local budgets = {}
for _, b in ipairs(touched) do
  budgets[#budgets + 1] = {scope = b.scope, unit = b.unit,
    f = BAL.amounts(redis.call('HGET', b.key, 'bal')) or {allocated = '', remaining = '', reserved = '', spent = '', debt = ''}}
end
local row = quarantine_row(prefix, id)
local resp = cjson.encode({outcome = data.outcome, row = row, budgets = budgets})
ops_remember(idem_key, ARGV[5], resp, ttl)
local scope = ''
local sp = redis.call('HGET', h.key, 'scope_path')
if sp then scope = sp end
local emit = event_emitter(stream, ARGV[7], now)
emit('reservation.quarantine_resolved', 'reservation', scope, data)
audit_ok(KEYS[1], ARGV[7])
return {'OK', '{"replay":false,"resp":' .. resp .. '}'}
