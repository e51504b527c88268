-- lib/quota.lua: the v0.1.26 action governance of the reserve and decide
-- scripts (docs/protocol.md#v0126-action-governance): access lists, then
-- risk-class quotas, then per-kind quotas, all before the budget checks, and
-- the counter writes of a live ALLOW. Included with "-- include: lib/quota.lua".
-- include: lib/ledger_util.lua lib/keys.lua lib/policy.lua
--
-- Counters live in the tenant's hash slot, named from the tenant prefix.
-- Calendar windows (per_minute, per_hour, per_day, per_tenant_per_day): one
-- hash per tenant and UTC day of Redis TIME (key_quota_day:
-- <prefix>qd:<day number>), so one HMGET reads and one HSET writes every
-- calendar counter a call touches. A counter is the field
--   <scope>|<counted>|<window code>      (counted: the kind, or
--                                         __risk__:<class>; POLICY_WCODE)
-- holding '<bucket>:<n>:<thr>:<at>:<limit>:<policy id>': bucket is the
-- window instance (Redis TIME ms / the window's length, a number, so no date
-- is formatted on the hot path), n the calls counted in it, thr '1' once
-- quota.threshold_approaching was emitted for it, at the Redis TIME of the
-- last count (ms), limit and policy those of that count. A value of an
-- earlier bucket reads as 0 (the window rolled over) and is overwritten by
-- the next count. Every window divides the UTC day, so a bucket never spans
-- two day hashes. Field '_' holds when the hash expires (the day's end plus
-- QUOTA_GRACE_MS): it is written, with PEXPIREAT and the index entry, by the
-- first count of the day only. A counter is live while its bucket's end plus
-- QUOTA_GRACE_MS is ahead (the listing and the reset skip the others).
-- per_run: one hash per counter (key_quota_counter: <prefix>q:<scope>|
-- <counted>|per_run|<run id>) with fields n, lim, pol, at, exp, thr and,
-- written with the first count, sc, k, rc, w, wk, ttl (what the key names,
-- for the listing; ttl the quota's per_run_counter_ttl_ms, refreshed with
-- every count: the key expires that long after the run's last call).
-- <prefix>qidx is a sorted set of the tenant's day hashes and per_run
-- counters (score: expiry) that the listing walks.

local QUOTA_LEN = {m = 60000, h = 3600000, d = 86400000, t = 86400000}
local QUOTA_GRACE_MS = 60000

-- quota_date is the UTC civil date of a day number since 1970-01-01 (the
-- days-from-civil inverse; integer arithmetic on exact doubles).
local function quota_date(days)
  local z = days + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local d = doy - math.floor((153 * mp + 2) / 5) + 1
  local m = (mp < 10) and (mp + 3) or (mp - 9)
  local y = yoe + era * 400
  if m <= 2 then y = y + 1 end
  return y, m, d
end

-- quota_wkey is the spec's window key of calendar bucket b (a number) of
-- window code w: "2026-04-09T14:32", "2026-04-09T14" or "2026-04-09".
local function quota_wkey(w, b)
  local ms_ = b * QUOTA_LEN[w]
  local days = math.floor(ms_ / 86400000)
  local y, mo, d = quota_date(days)
  local key = string.format('%04d-%02d-%02d', y, mo, d)
  local rest = ms_ - days * 86400000
  if w == 'h' then
    key = key .. string.format('T%02d', math.floor(rest / 3600000))
  elseif w == 'm' then
    key = key .. string.format('T%02d:%02d', math.floor(rest / 3600000), math.floor((rest % 3600000) / 60000))
  end
  return key
end

-- quota_field_parse reads a calendar counter value: bucket, n, thr, at,
-- limit, policy id (strings); nil when malformed.
local function quota_field_parse(v)
  return string.match(v, '^(%d+):(%d+):(1?):(%d*):(%d*):(.*)$')
end

-- quota_deny is the DenyDetail of an ACTION_QUOTA_EXCEEDED.
local function quota_deny(v)
  local what = (v.rc and (v.rc .. ' (risk class)') or v.kind) .. ' ' .. v.q.w
  local fix = 'Increase the ' .. what .. ' limit of ' .. v.q.m .. ' in policy ' .. v.pol
  if v.q.w == 'per_run' then
    fix = fix .. ' or start a new run'
  else
    fix = 'Wait for the next ' .. v.q.w .. ' window or increase the ' .. what .. ' limit of ' .. v.q.m .. ' in policy ' .. v.pol
  end
  return {reason_code = 'ACTION_QUOTA_EXCEEDED', blocked_by_scope = v.sc, blocked_by_policy = v.pol, suggested_fix = fix,
    quota_violation = {action_kind = v.kind, risk_class = v.rc, window = v.q.w, window_key = v.wk, used = v.used,
      limit = v.q.m, scope = v.sc, policy_id = v.pol}}
end

-- quota_entries parses a compiled pk:/pr: value (lib/policy.lua): a list of
-- {policy line number, mark, quota text} in evaluation order.
local function quota_entries(v)
  local e = {}
  if v == nil or v == '' then return e end
  for ln, mark, qs in string.gmatch(v, '(%d+)\t(%a?)([^\n]*)\n') do e[#e + 1] = {tonumber(ln), mark, qs} end
  return e
end

-- quota_rules is the quotas of a compiled quota text ('\t<quota>'...): {c =
-- window code, m = max_calls, ms = the same as a string, tn = the count
-- that reaches the threshold, x = '<per_run TTL ms>,<threshold basis
-- points>[,<filters JSON>]' (read only when needed: quota_extra)}.
local function quota_rules(qs)
  local out = {}
  for w, m, tn, x in string.gmatch(qs, '\t(%a),(%d+),(%d+),([^\t]*)') do
    out[#out + 1] = {c = w, m = tonumber(m), ms = m, tn = tonumber(tn), x = x}
  end
  return out
end

-- quota_extra fills in quota q's per_run TTL (t, ms string), threshold
-- basis points (b, string) and allowlist sets (h / r / y: host / recipient
-- domain / resource type, nil = any).
local function quota_extra(q)
  if q.b then return q end
  local t, b, f = string.match(q.x, '^(%d+),(%d+),?(.*)$')
  q.t, q.b = t, b
  if f ~= '' then
    local fl = jdecode(f) or {}
    q.h, q.r, q.y = policy_set(fl.h), policy_set(fl.r), policy_set(fl.y)
  end
  return q
end

-- quota_applies: quota q applies to a call with policy keys keys_json (its
-- allowlists, when it has any, name the call's host / recipient domain /
-- resource type); memo keeps the decoded keys for the call.
local function quota_applies(q, keys_json, memo)
  if #q.x < 6 or not string.find(q.x, '{', 1, true) then return true end
  quota_extra(q)
  if memo.keys == nil then memo.keys = jdecode(keys_json) or {} end
  local function key(name)
    local v = memo.keys[name]
    if type(v) ~= 'string' or v == '' then return false end
    return v
  end
  if q.h and not q.h[key('host')] then return false end
  if q.r and not q.r[key('recipient_domain')] then return false end
  if q.y and not q.y[key('resource_type')] then return false end
  return true
end

-- quota_pick: the applying quotas of the highest-priority matching policy
-- (terms.gline) with quotas among entries (quota_entries), and its id.
local function quota_pick(entries, gline, keys_json, memo)
  for _, e in ipairs(entries) do
    local g = gline[e[1]]
    if g and e[3] ~= '' then
      local rules = quota_rules(e[3])
      for i = #rules, 1, -1 do
        if not quota_applies(rules[i], keys_json, memo) then table.remove(rules, i) end
      end
      return rules, g.id
    end
  end
  return nil
end

-- quota_plan evaluates the governance steps for a call of kind (risk class
-- risk; '' = an undeclared custom.* kind) at scope_path. terms is
-- policy_terms' answer (nil: no policy matches, nothing to do); pk and pr
-- the tenant record's compiled rules of the kind and of the risk class
-- (tenant_conf's conf.pk, conf.pr). run_id is
-- Subject.dimensions.run_id ('' = absent); keys_json the policy keys the
-- kind's spec lets quota allowlists match (actionkind.MatchKeys: a small JSON
-- object, '' = none; decoded only when a quota filters on them).
-- Returns one of:
--   nil, nil                      no rule applies
--   {counts...}, nil              the counters a live ALLOW must count
--                                 (quota_count)
--   nil, {code, msg, dd, field}   a refusal: dd set for a DENY
--                                 (ACTION_KIND_*, ACTION_QUOTA_EXCEEDED), field
--                                 for an INVALID_REQUEST
local function quota_plan(terms, pk, pr, kind, risk, run_id, keys_json, scope_path, tenant_scope, now, prefix)
  local gov = terms and terms.gov
  if gov == nil then return nil, nil end
  if risk == '' then
    return nil, {code = 'INVALID_REQUEST', field = 'action.kind',
      msg = kind .. ' is not a declared custom action kind (declare it with -custom-action-kinds)'}
  end
  local kinds = quota_entries(pk)
  -- Step 1: the access lists of the highest-priority matching policy that has any.
  for _, g in ipairs(gov) do
    if g.f ~= 'Q' then
      local mark = ''
      for _, e in ipairs(kinds) do
        if e[1] == g.i then mark = e[2]; break end
      end
      if mark == 'd' then
        return nil, {code = 'ACTION_KIND_DENIED', msg = kind .. ' is denied by policy ' .. g.id,
          dd = {reason_code = 'ACTION_KIND_DENIED', blocked_by_policy = g.id, blocked_by_scope = scope_path,
            suggested_fix = 'Remove ' .. kind .. ' from denied_action_kinds of policy ' .. g.id}}
      end
      if mark ~= 'a' and string.find(g.f, 'A', 1, true) then
        return nil, {code = 'ACTION_KIND_NOT_ALLOWED', msg = kind .. ' is not in the allowlist of policy ' .. g.id,
          dd = {reason_code = 'ACTION_KIND_NOT_ALLOWED', blocked_by_policy = g.id, blocked_by_scope = scope_path,
            suggested_fix = 'Add ' .. kind .. ' to allowed_action_kinds of policy ' .. g.id}}
      end
      break
    end
  end
  -- Steps 2 and 3: the risk-class rules, then the kind's rules, each from the
  -- highest-priority matching policy that has rules for it. The most
  -- restrictive violated rule (least headroom) of the first step that has
  -- one refuses; otherwise every applying counter is counted once.
  local memo = {}
  local steps = {}
  local rrules, rpol = quota_pick(quota_entries(pr), terms.gline, keys_json, memo)
  if rrules then steps[#steps + 1] = {rrules, rpol, risk, '__risk__:' .. risk} end
  local krules, kpol = quota_pick(kinds, terms.gline, keys_json, memo)
  if krules then steps[#steps + 1] = {krules, kpol, nil, kind} end
  if #steps == 0 then return nil, nil end
  -- The counter of every applying rule (cs[step][rule]): calendar ones read
  -- by one HMGET of the day hash, per_run ones by one HMGET each. Nothing is
  -- written here.
  local counts, seen, fields, buckets, cs = {}, {}, {'_'}, {}, {}
  local sp_ = scope_path .. '|'
  for si, st in ipairs(steps) do
    local pol, csi = st[2], {}
    cs[si] = csi
    for qi, q in ipairs(st[1]) do
      local tday = q.c == 't'
      local sc = tday and tenant_scope or scope_path
      local id
      if q.c == 'r' then
        id = (run_id ~= '') and key_quota_counter(prefix, sc, st[4], 'per_run', run_id) or nil
      else
        id = (tday and (tenant_scope .. '|') or sp_) .. st[4] .. '|' .. q.c
      end
      local c = id and seen[id]
      if id and c == nil then
        c = {used = 0, q = q, pol = pol, sc = sc, kind = kind, rc = st[3]}
        seen[id] = c
        counts[#counts + 1] = c
        if q.c == 'r' then
          c.key, c.wk = id, run_id
          local v = redis.call('HMGET', id, 'n', 'thr')
          c.used, c.thr = tonumber(v[1] or '0') or 0, v[2]
        else
          -- The window instance's bucket, as a string once per window.
          local b = buckets[q.c]
          if b == nil then
            b = string.format('%d', math.floor(now / QUOTA_LEN[q.c]))
            buckets[q.c] = b
          end
          c.field, c.bucket = id, b
          fields[#fields + 1] = id
        end
      end
      csi[qi] = c or false
    end
  end
  if #fields > 1 then
    local day = buckets.d or buckets.t or string.format('%d', math.floor(now / 86400000))
    local dkey = key_quota_day(prefix, day)
    local v = redis.call('HMGET', dkey, unpack(fields))
    counts.day, counts.dkey, counts.dnew = day, dkey, not v[1]
    for i = 2, #fields do
      local raw = v[i]
      if raw then
        local c = seen[fields[i]]
        local b, n, thr = string.match(raw, '^(%d+):(%d+):(1?):')
        if b == c.bucket then c.used, c.thr = tonumber(n), thr end
      end
    end
  end
  -- Evaluate in step order (a refusal of the risk-class step comes first).
  for si, st in ipairs(steps) do
    local worst = nil
    for qi, q in ipairs(st[1]) do
      local c = cs[si][qi]
      if not c then
        return nil, {code = 'INVALID_REQUEST', field = 'subject.dimensions.run_id',
          msg = 'subject.dimensions.run_id is required: a per_run quota of policy ' .. st[2] .. ' applies'}
      end
      if c.used >= q.m and (worst == nil or q.m - c.used < worst.q.m - worst.used) then
        worst = {q = q, used = c.used, pol = st[2], sc = c.sc, kind = kind, rc = st[3],
          wk = c.wk or quota_wkey(q.c, tonumber(c.bucket))}
      end
    end
    if worst then
      local what = st[3] and ('risk-class quota ' .. st[3]) or ('action quota ' .. kind)
      worst.q.w = POLICY_WNAME[worst.q.c]
      return nil, {code = 'ACTION_QUOTA_EXCEEDED', dd = quota_deny(worst),
        msg = what .. ' ' .. worst.q.w .. ' limit ' .. worst.q.m .. ' reached at ' .. worst.sc}
    end
  end
  if #counts == 0 then return nil, nil end
  return counts, nil
end

-- quota_crossed emits quota.threshold_approaching for counter c reaching n.
local function quota_crossed(emit, tenant, c, n, wk)
  local q = quota_extra(c.q)
  emit('quota.threshold_approaching', 'policy', c.sc, {
    tenant_id = tenant, scope = c.sc, action_kind = c.rc and '__risk__' or c.kind, risk_class = c.rc, window = POLICY_WNAME[q.c],
    window_key = wk, used = n, limit = q.m, threshold_pct = tonumber(q.b) / 10000, policy_id = c.pol,
  })
end

-- quota_count writes the counts of a live ALLOW (every counter +1; the
-- calendar ones in one HSET of the day hash, whose expiry and index entry
-- are written by the day's first count only; per_run ones with their TTL
-- refreshed) and returns the keys of the per_run counters (the reservation
-- keeps them: release and expiry give those calls back, see quota_refund in
-- lib/refund.lua).
-- emit is the script's emitter: a count reaching a quota's threshold emits
-- quota.threshold_approaching (category policy) once per window instance.
local function quota_count(counts, now, emit, tenant, prefix)
  local runs, set = {}, {}
  local idx = nil
  local now_s = ms(now)
  local function index(key, exp_s)
    if idx == nil then
      idx = key_quota_index(prefix)
      -- Bounded upkeep: index entries whose counters have expired.
      redis.call('ZREMRANGEBYSCORE', idx, '-inf', '(' .. now_s)
    end
    redis.call('ZADD', idx, exp_s, key)
  end
  for _, c in ipairs(counts) do
    local n, q = c.used + 1, c.q
    -- The crossing, once per window instance: thr marks it emitted (a count
    -- given back and taken again does not alert twice).
    local crossed = (not c.thr or c.thr == '') and c.used < q.tn and n >= q.tn
    if c.field then
      set[#set + 1] = c.field
      set[#set + 1] = c.bucket .. ':' .. n .. ':' .. ((crossed or c.thr == '1') and '1' or '') .. ':' .. now_s .. ':' ..
        q.ms .. ':' .. c.pol
      if crossed then quota_crossed(emit, tenant, c, n, quota_wkey(q.c, tonumber(c.bucket))) end
    else
      quota_extra(q)
      local exp_s = ms(now + tonumber(q.t))
      if c.used == 0 then
        redis.call('HSET', c.key, 'n', n, 'at', now_s, 'lim', q.ms, 'pol', c.pol, 'exp', exp_s, 'sc', c.sc,
          'k', c.rc and '__risk__' or c.kind, 'rc', c.rc or '', 'w', 'per_run', 'wk', c.wk, 'ttl', q.t)
      else
        redis.call('HSET', c.key, 'n', n, 'at', now_s, 'lim', q.ms, 'pol', c.pol, 'exp', exp_s)
      end
      redis.call('PEXPIREAT', c.key, exp_s)
      index(c.key, exp_s)
      runs[#runs + 1] = c.key
      if crossed then
        redis.call('HSET', c.key, 'thr', '1')
        quota_crossed(emit, tenant, c, n, c.wk)
      end
    end
  end
  if #set > 0 then
    if counts.dnew then
      local exp_s = ms((counts.day + 1) * 86400000 + QUOTA_GRACE_MS)
      set[#set + 1], set[#set + 2] = '_', exp_s
      redis.call('HSET', counts.dkey, unpack(set))
      redis.call('PEXPIREAT', counts.dkey, exp_s)
      index(counts.dkey, exp_s)
    else
      redis.call('HSET', counts.dkey, unpack(set))
    end
  end
  return runs
end
