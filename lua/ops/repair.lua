-- ops/repair: fix the provably safe discrepancies of one tenant in one atomic
-- call, or (dry run) report exactly the changes it would make.
-- include: lib/ops_hold.lua lib/ops_idem.lua lib/audit.lua
--
-- Audit: on an applied repair, the call's audit entry in the same run (lib/audit.lua).
-- KEYS: 1 tenant_prefix    "cy:{t:<tenant>}:"; indexes, records and budget hashes
--                          are derived from it
--       2 idem_record      cy:{t:<tenant>}:idem:repair:<key> (apply only)
--       3 event_stream     cy:{t:<tenant>}:events
-- ARGV: 1 plan             JSON (candidates found by the audit; every one is
--                          re-checked here): {scope = root scope, orphans,
--                          finalized, unindexed, rescore, q_unindexed, q_stale,
--                          no_ttl = [ids], budgets = ["<scope_path>|<UNIT>"]}
--       2 apply            '1' = apply, '0' = dry run (no write at all)
--       3 payload_hash     apply only
--       4 idem_lifetime_ms apply only
--       5 event_ctx        event context (internal/eventctx.Arg)
--       6 holds_limit
-- Refusals: INVALID_REQUEST; TENANT_NOT_FOUND (the tenant has no record: no
--   repair, and no idempotency record, is written)
-- Result {"replay":bool,"resp":...}: the changes made (or, dry, to make) and the
-- budgets left alone.
-- JSON ops/repair: replay resp{changes[]{kind action id scope unit before after}
--   skipped[]{kind scope unit msg ev}}
--
-- What is safe (docs/operations-runbook.md): dropping index entries whose
-- record is gone or terminal, indexing ACTIVE records with a valid expiry,
-- giving terminal records their TTL, and per budget setting reserved to the
-- sum of its ACTIVE holds (summed here, in this script) when that restores
-- remaining = allocated - spent - reserved - debt: as is (only reserved was
-- wrong) or by returning the difference to remaining (a hold whose record is
-- gone, as the sweeper would have). allocated, spent and debt are never
-- written; a budget held by a quarantined or unparseable reservation is left
-- for ResolveQuarantined.

local prefix, idem_key, stream = KEYS[1], KEYS[2], KEYS[3]
local apply = ARGV[2] == '1'
local okp, plan = pcall(cjson.decode, ARGV[1])
if not okp or type(plan) ~= 'table' then return fail('INVALID_REQUEST', 'malformed repair plan') end
local limit = tonumber(ARGV[6])
if not limit or limit < 1 then return fail('INVALID_REQUEST', 'holds limit must be positive') end
local missing = missing_tenant(prefix)
if missing then return missing end

if apply then
  local replay = ops_replay(idem_key, ARGV[3])
  if replay then return replay end
end

local function ids(name)
  local v = plan[name]
  if type(v) ~= 'table' then return {} end
  local out = {}
  for _, id in ipairs(v) do
    if type(id) == 'string' and id ~= '' then out[#out + 1] = id end
  end
  return out
end

local now = now_ms()
local dl, qi = key_index(prefix, 'deadline'), key_index(prefix, 'quarantine')
local changes, skipped = {}, {}
local function change(c)
  c.before = c.before or {}
  c.after = c.after or {}
  changes[#changes + 1] = c
end
local function skip(s)
  s.ev = s.ev or {}
  skipped[#skipped + 1] = s
end
local function w(...)
  if apply then redis.call(...) end
end

for _, id in ipairs(ids('orphans')) do
  local score = redis.call('ZSCORE', dl, id)
  if score and read_hold(prefix, id).missing then
    w('ZREM', dl, id)
    change({kind = 'INDEX_ORPHAN', action = 'ZREM deadline index', id = id, before = {score = score}})
  end
end
for _, id in ipairs(ids('finalized')) do
  local score = redis.call('ZSCORE', dl, id)
  local h = read_hold(prefix, id)
  if score and TERMINAL_STATES[h.state or ''] then
    w('ZREM', dl, id)
    change({kind = 'INDEX_FINALIZED', action = 'ZREM deadline index', id = id, before = {score = score, state = h.state}})
  end
end
local extra = {}
for _, id in ipairs(ids('unindexed')) do
  local h = read_hold(prefix, id)
  if h.state == 'ACTIVE' and not h.quarantined_at and not redis.call('ZSCORE', dl, id) then
    parse_hold(h)
    if h.deadline then
      local score = string.format('%.0f', h.deadline)
      w('ZADD', dl, score, id)
      extra[#extra + 1] = id
      change({kind = 'ACTIVE_NOT_INDEXED', action = 'ZADD deadline index', id = id, after = {score = score}})
    end
  end
end
for _, id in ipairs(ids('rescore')) do
  local h = read_hold(prefix, id)
  local score = redis.call('ZSCORE', dl, id)
  if h.state == 'ACTIVE' and not h.quarantined_at and score then
    parse_hold(h)
    if h.deadline and tonumber(score) ~= h.deadline then
      local want = string.format('%.0f', h.deadline)
      w('ZADD', dl, want, id)
      change({kind = 'DEADLINE_SCORE_MISMATCH', action = 'ZADD deadline index', id = id,
        before = {score = score}, after = {score = want}})
    end
  end
end
for _, id in ipairs(ids('q_unindexed')) do
  local h = read_hold(prefix, id)
  if is_quarantined(h) and is_small(h.quarantined_at) and not redis.call('ZSCORE', qi, id) then
    w('ZADD', qi, h.quarantined_at, id)
    extra[#extra + 1] = id
    change({kind = 'QUARANTINE_NOT_INDEXED', action = 'ZADD quarantine index', id = id, after = {score = h.quarantined_at}})
  end
end
for _, id in ipairs(ids('q_stale')) do
  local h = read_hold(prefix, id)
  if redis.call('ZSCORE', qi, id) and not is_quarantined(h) then
    w('ZREM', qi, id)
    change({kind = 'QUARANTINE_STALE', action = 'ZREM quarantine index', id = id, before = {state = h.state or ''}})
  end
end
for _, id in ipairs(ids('no_ttl')) do
  local h = read_hold(prefix, id)
  if not h.missing and not h.wrong_type and TERMINAL_STATES[h.state or ''] and redis.call('PTTL', h.key) == -1 then
    -- Keep it for what is left of the terminal retention (at least a minute).
    local at = tonumber(h.finalized_at or h.expired_at or '') or now
    local ttl = math.max(60000, at + HOLD_RETENTION_MS - now)
    w('PEXPIRE', h.key, string.format('%.0f', ttl))
    change({kind = 'TERMINAL_NO_TTL', action = 'PEXPIRE record', id = id, after = {ttl_ms = string.format('%.0f', ttl)}})
  end
end

local budgets = ids('budgets')
if #budgets > 0 then
  local holds = active_holds(prefix, limit, extra)
  for _, m in ipairs(budgets) do
    local bar = string.find(m, '|[^|]*$')
    local path, unit = m, ''
    if bar then path, unit = string.sub(m, 1, bar - 1), string.sub(m, bar + 1) end
    local function no(msg, ev)
      skip({kind = 'RESERVED_MISMATCH', scope = path, unit = unit, msg = msg, ev = ev})
    end
    if not bar then
      no('malformed budgets index member')
    elseif holds == nil then
      no('more ACTIVE reservations than the repair reads in one script', {limit = ARGV[6]})
    elseif holds.quarantined[m] then
      no('held by quarantined reservation ' .. holds.quarantined[m] .. '; resolve it first')
    elseif holds.all_uncertain or holds.uncertain[m] then
      no('an ACTIVE reservation holding it does not parse; resolve it first')
    else
      local key = key_budget(prefix, path, unit)
      -- The packed balance (lib/core.lua BAL), split without judging it: a
      -- bad reserved or remaining is repairable, the other parts are kept
      -- as stored when the field is rewritten.
      local bv = redis.pcall('HGET', key, 'bal')
      if type(bv) == 'table' and bv.err then
        no('budget key is not a hash')
      elseif not bv and redis.call('EXISTS', key) == 0 then
        no('budget does not exist')
      else
        local p = BAL.parts(bv) or {'', '', '', '', '', '', '', ''}
        local raw = {allocated = p[5], remaining = p[2], reserved = p[3], spent = p[4], debt = p[6]}
        local alloc, rem, res, spent, debt = i64_norm(p[5]), i64_norm(p[2]), i64_norm(p[3]), i64_norm(p[4]), i64_norm(p[6])
        local S = holds.sums[m] or '0'
        -- expected remaining for a given reserved: allocated - spent - reserved - debt
        local function want_rem(r)
          if not (alloc and spent and debt and r) then return nil end
          local x = i64_sub(alloc, spent)
          if x then x = i64_sub(x, r) end
          if x then x = i64_sub(x, debt) end
          return x
        end
        local ev = {allocated = raw.allocated, remaining = raw.remaining, reserved = raw.reserved,
          spent = raw.spent, debt = raw.debt, sum_of_holds = S}
        if not (alloc and spent and debt) then
          no('allocated, spent or debt is missing or malformed; never repaired automatically', ev)
        elseif res == S and rem and rem == want_rem(S) then
          -- Consistent now (fixed since the audit, or only its index was off).
        elseif rem and rem == want_rem(S) then
          p[3] = S
          w('HSET', key, 'bal', table.concat(p, ':'))
          change({kind = (res and 'RESERVED_MISMATCH' or 'BUDGET_FIELD_INVALID'), action = 'HSET reserved',
            scope = path, unit = unit, before = {reserved = raw.reserved}, after = {reserved = S}})
        elseif rem and res and rem == want_rem(res) then
          -- The identity held with the old reserved: the difference is a hold
          -- without a holder; return it to remaining, as a release would.
          local new_rem = want_rem(S)
          if new_rem == nil then
            no('returning the difference would overflow int64', ev)
          else
            p[2], p[3] = new_rem, S
            w('HSET', key, 'bal', table.concat(p, ':'))
            change({kind = 'RESERVED_MISMATCH', action = 'HSET reserved, remaining', scope = path, unit = unit,
              before = {reserved = res, remaining = rem}, after = {reserved = S, remaining = new_rem}})
          end
        elseif res == S and rem == nil then
          local new_rem = want_rem(S)
          if new_rem == nil then
            no('remaining would overflow int64', ev)
          else
            p[2] = new_rem
            w('HSET', key, 'bal', table.concat(p, ':'))
            change({kind = 'BUDGET_FIELD_INVALID', action = 'HSET remaining', scope = path, unit = unit,
              before = {remaining = raw.remaining}, after = {remaining = new_rem}})
          end
        else
          skip({kind = 'BALANCE_IDENTITY', scope = path, unit = unit,
            msg = 'no single safe change restores remaining = allocated - spent - reserved - debt', ev = ev})
        end
      end
    end
  end
end

local resp = cjson.encode({changes = changes, skipped = skipped})
if apply then
  local ttl = tonumber(ARGV[4])
  if not ttl or ttl < 1 then return fail('INVALID_REQUEST', 'idempotency lifetime must be positive') end
  ops_remember(idem_key, ARGV[3], resp, ttl)
  audit_ok(KEYS[1], ARGV[5])
  if #changes > 0 then
    local kinds = {}
    for _, c in ipairs(changes) do kinds[c.kind] = (kinds[c.kind] or 0) + 1 end
    local emit = event_emitter(stream, ARGV[5], now)
    emit('tenant.ledger_repaired', 'tenant', plan.scope or '', {changes = #changes, kinds = kinds})
  end
end
return {'OK', '{"replay":false,"resp":' .. resp .. '}'}
