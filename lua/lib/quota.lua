-- lib/quota.lua: the v0.1.26 action governance of the reserve and decide
-- scripts (docs/protocol.md#v0126-action-governance): access lists, then
-- risk-class quotas, then per-kind quotas, all before the budget checks, and
-- the counter writes of a live ALLOW. Included with "-- include: lib/quota.lua".
-- include: lib/ledger_util.lua lib/keys.lua lib/policy.lua
--
-- Counters: one hash per (scope, kind or risk class, window, window key) in
-- the tenant's slot, derived from the tenant prefix:
--   <prefix>q:<scope>|<kind or __risk__:<class>>|<window>|<window key>
-- fields n (calls counted), lim, pol (the quota's max_calls and policy at the
-- last count), at (Redis TIME of the last count, ms), exp (when the key
-- expires, ms), thr ('1' once quota.threshold_approaching was emitted) and,
-- written with the first count, sc, k, rc, w, wk (what the key names, for
-- the operator listing) and ttl (per_run: the TTL a reset refreshes).
-- <prefix>qidx is a sorted set of the
-- tenant's counter keys (score: exp) that the listing walks.
-- Calendar windows: the key names the UTC bucket of Redis TIME, and expires
-- QUOTA_GRACE_MS after the bucket ends (the key's TTL never defines the
-- window). per_run: the key names the run_id and its TTL (the quota's
-- per_run_counter_ttl_ms) is refreshed on every count.

local QUOTA_LEN = {per_minute_tumbling = 60000, per_hour_tumbling = 3600000, per_day_tumbling = 86400000,
  per_tenant_per_day = 86400000}
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

-- quota_window is a window's key at now ("2026-04-09T14:32", "...T14",
-- "2026-04-09" or the run id) and when its counter key expires (ms). memo
-- (one per script run) keeps each calendar window's answer, so five quotas
-- format the date once per window, not once per quota.
local function quota_window(q, now, run_id, memo)
  if q.w == 'per_run' then return run_id, now + q.t end
  local m = memo[q.w]
  if m then return m[1], m[2] end
  local len = QUOTA_LEN[q.w]
  local start = now - (now % len)
  local day = memo.day
  if day == nil then
    local days = math.floor(now / 86400000)
    local y, mo, d = quota_date(days)
    day = string.format('%04d-%02d-%02d', y, mo, d)
    memo.day, memo.rest = day, now - days * 86400000
  end
  local key, rest = day, memo.rest
  if q.w == 'per_hour_tumbling' then
    key = day .. string.format('T%02d', math.floor(rest / 3600000))
  elseif q.w == 'per_minute_tumbling' then
    key = day .. string.format('T%02d:%02d', math.floor(rest / 3600000), math.floor((rest % 3600000) / 60000))
  end
  memo[q.w] = {key, start + len + QUOTA_GRACE_MS}
  return key, start + len + QUOTA_GRACE_MS
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

-- quota_rules is the quotas of a compiled quota text ('\t<quota>'...): {w =
-- window, m = max_calls, t = per_run TTL ms, b = threshold basis points,
-- h / r / y = host / recipient domain / resource type allowlist sets or nil}.
local function quota_rules(qs)
  local out = {}
  for w, m, t, b, f in string.gmatch(qs, '\t(%a),(%d+),(%d+),(%d+),?([^\t]*)') do
    local q = {w = POLICY_WNAME[w], m = tonumber(m), ms = m, t = tonumber(t), b = tonumber(b)}
    if f ~= '' then
      local fl = jdecode(f) or {}
      q.h, q.r, q.y = policy_set(fl.h), policy_set(fl.r), policy_set(fl.y)
    end
    out[#out + 1] = q
  end
  return out
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
    if string.find(g.f, '[AD]') then
      local mark = ''
      for _, e in ipairs(kinds) do
        if e[1] == g.i then mark = e[2]; break end
      end
      if mark == 'd' then
        return nil, {code = 'ACTION_KIND_DENIED', msg = kind .. ' is denied by policy ' .. g.id,
          dd = {reason_code = 'ACTION_KIND_DENIED', blocked_by_policy = g.id, blocked_by_scope = scope_path,
            suggested_fix = 'Remove ' .. kind .. ' from denied_action_kinds of policy ' .. g.id}}
      end
      if string.find(g.f, 'A', 1, true) and mark ~= 'a' then
        return nil, {code = 'ACTION_KIND_NOT_ALLOWED', msg = kind .. ' is not in the allowlist of policy ' .. g.id,
          dd = {reason_code = 'ACTION_KIND_NOT_ALLOWED', blocked_by_policy = g.id, blocked_by_scope = scope_path,
            suggested_fix = 'Add ' .. kind .. ' to allowed_action_kinds of policy ' .. g.id}}
      end
      break
    end
  end
  local counts, seen, keys_, memo = {}, {}, nil, {}
  local function policy_key(name)
    if keys_ == nil then keys_ = jdecode(keys_json) or {} end
    local v = keys_[name]
    if type(v) ~= 'string' or v == '' then return nil end
    return v
  end
  local function applies(q)
    if q.h and not q.h[policy_key('host') or false] then return false end
    if q.r and not q.r[policy_key('recipient_domain') or false] then return false end
    if q.y and not q.y[policy_key('resource_type') or false] then return false end
    return true
  end
  -- step: the quotas of the highest-priority matching policy with quotas
  -- among entries (quota_entries), counted as rc's or the kind's.
  local function step(entries, rc)
    local rules, pol = nil, nil
    for _, e in ipairs(entries) do
      local g = terms.gline[e[1]]
      if g and e[3] ~= '' then rules, pol = quota_rules(e[3]), g.id; break end
    end
    if rules == nil then return nil end
    local worst = nil
    for _, q in ipairs(rules) do
      if applies(q) then
        if q.w == 'per_run' and run_id == '' then
          return {code = 'INVALID_REQUEST', field = 'subject.dimensions.run_id',
            msg = 'subject.dimensions.run_id is required: a per_run quota of policy ' .. pol .. ' applies'}
        end
        local wk, exp = quota_window(q, now, run_id, memo)
        local sc = (q.w == 'per_tenant_per_day') and tenant_scope or scope_path
        local key = key_quota_counter(prefix, sc, rc and ('__risk__:' .. rc) or kind, q.w, wk)
        local c = seen[key]
        if c == nil then
          local v = redis.call('HMGET', key, 'n', 'thr', 'lim', 'pol')
          c = {key = key, used = tonumber(v[1] or '0') or 0, thr = v[2], same = v[3] == q.ms and v[4] == pol,
            q = q, pol = pol, sc = sc, wk = wk, exp = exp, kind = kind, rc = rc}
          seen[key] = c
          counts[#counts + 1] = c
        end
        if c.used >= q.m and (worst == nil or q.m - c.used < worst.q.m - worst.used) then
          worst = {q = q, used = c.used, pol = pol, sc = sc, wk = wk, kind = kind, rc = rc}
        end
      end
    end
    if worst then
      local what = rc and ('risk-class quota ' .. rc) or ('action quota ' .. kind)
      return {code = 'ACTION_QUOTA_EXCEEDED', dd = quota_deny(worst),
        msg = what .. ' ' .. worst.q.w .. ' limit ' .. worst.q.m .. ' reached at ' .. worst.sc}
    end
    return nil
  end
  local refusal = step(quota_entries(pr), risk) or step(kinds, nil)
  if refusal then return nil, refusal end
  if #counts == 0 then return nil, nil end
  return counts, nil
end

-- quota_count writes the counts of a live ALLOW (every counter +1, TTLs as
-- above, the index) and returns the keys of the per_run counters (the
-- reservation keeps them: release and expiry give those calls back, see
-- quota_refund in lib/refund.lua).
-- emit is the script's emitter: a count reaching a quota's threshold emits
-- quota.threshold_approaching (category policy) once per window instance.
local function quota_count(counts, now, emit, tenant, prefix)
  local runs = {}
  local idx = nil
  local now_s = ms(now)
  for _, c in ipairs(counts) do
    local n, q = c.used + 1, c.q
    if c.used == 0 then
      redis.call('HSET', c.key, 'n', n, 'at', now_s, 'lim', q.m, 'pol', c.pol, 'exp', ms(c.exp), 'sc', c.sc,
        'k', c.rc and '__risk__' or c.kind, 'rc', c.rc or '', 'w', q.w, 'wk', c.wk, 'ttl', q.t)
    elseif q.w == 'per_run' then
      redis.call('HSET', c.key, 'n', n, 'at', now_s, 'lim', q.m, 'pol', c.pol, 'exp', ms(c.exp))
    elseif c.same then
      -- The steady state: limit and policy as recorded, two fields change.
      redis.call('HSET', c.key, 'n', n, 'at', now_s)
    else
      redis.call('HSET', c.key, 'n', n, 'at', now_s, 'lim', q.m, 'pol', c.pol)
    end
    if c.used == 0 or q.w == 'per_run' then
      local exp_s = ms(c.exp)
      redis.call('PEXPIREAT', c.key, exp_s)
      if idx == nil then
        idx = key_quota_index(prefix)
        -- Bounded upkeep: index entries whose counters have expired.
        redis.call('ZREMRANGEBYSCORE', idx, '-inf', '(' .. ms(now))
      end
      redis.call('ZADD', idx, exp_s, c.key)
    end
    if q.w == 'per_run' then runs[#runs + 1] = c.key end
    -- The crossing, once per window instance: `thr` marks it emitted (a
    -- count given back and taken again does not alert twice).
    local at = q.m * q.b
    if not c.thr and c.used * 10000 < at and n * 10000 >= at then
      redis.call('HSET', c.key, 'thr', '1')
      emit('quota.threshold_approaching', 'policy', c.sc, {
        tenant_id = tenant, scope = c.sc, action_kind = c.rc and '__risk__' or c.kind, risk_class = c.rc, window = q.w,
        window_key = c.wk, used = n, limit = q.m, threshold_pct = q.b / 10000, policy_id = c.pol,
      })
    end
  end
  return runs
end
