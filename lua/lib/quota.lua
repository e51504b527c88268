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

-- QUOTA_MEMO: the compiled rules of a pk:/pr: value (lib/policy.lua) as
-- tables, kept across calls while the Functions library stays loaded (under
-- EVALSHA every call starts empty), so a reserve reads its rules instead of
-- parsing them: memo.k[kind][value] and memo.r[risk class][value] = {marks =
-- {[line number] = mark}, lines = {{ln = line number, q = it has quotas,
-- rules = {rule, ...}}, ...}}, a rule being {c = window code, m = max_calls,
-- ms = max_calls as written, tn = threshold count, x = '<per_run TTL
-- ms>,<threshold basis points>[,<filters JSON>]', fs = its allowlists
-- ({{set, policy key name}, ...}; nil: none), sfx = '|<counted>|<c>', ids =
-- {[scope] = its day hash field}, tails = {[policy id] = ':<max_calls>:<policy
-- id>'}}. An entry is a pure function of what is counted and the value's text,
-- so it is never stale. memo.b holds the bucket strings of the current
-- minute. Bounded: past QUOTA_MEMO_MAX entries it starts over.
local QUOTA_MEMO, QUOTA_MEMO_MAX = {k = {}, r = {}, n = 0, b = {}}, 2048

-- quota_memo_put keeps v under k in memo table tbl (the memo starts over
-- when full).
local function quota_memo_put(tbl, k, v)
  local memo = QUOTA_MEMO
  if memo.n >= QUOTA_MEMO_MAX then memo.k, memo.r, memo.n = {}, {}, 0 end
  tbl[k], memo.n = v, memo.n + 1
end

-- quota_rules is the memo entry of compiled value v ('' = none: nil) of the
-- rules naming key (a kind, or with risk a risk class).
local function quota_rules(v, key, risk)
  if v == '' then return nil end
  local memo = QUOTA_MEMO
  local by = (risk and memo.r or memo.k)[key]
  local e = by and by[v]
  if e then return e end
  local counted = risk and ('__risk__:' .. key) or key
  e = {marks = {}, lines = {}}
  for ln, mark, qs in string.gmatch(v, '(%d+)\t(%a?)([^\n]*)\n') do
    if e.marks[ln] == nil then e.marks[ln] = mark end
    local rules = {}
    for c, m, tn, x in string.gmatch(qs, '\t(%a),(%d+),(%d+),([^\t]*)') do
      local r = {c = c, m = tonumber(m), ms = m, tn = tonumber(tn), x = x, sfx = '|' .. counted .. '|' .. c, ids = {},
        tails = {}}
      if string.find(x, '{', 1, true) then
        -- Allowlists: the call's host / recipient domain / resource type
        -- must be named.
        local f, fs = jdecode(string.match(x, '^%d+,%d+,(.*)$')) or {}, {}
        for _, a in ipairs({{'h', 'host'}, {'r', 'recipient_domain'}, {'y', 'resource_type'}}) do
          local set = policy_set(f[a[1]])
          if set then fs[#fs + 1] = {set, a[2]} end
        end
        if #fs > 0 then r.fs = fs end
      end
      rules[#rules + 1] = r
    end
    e.lines[#e.lines + 1] = {ln = ln, q = (qs ~= ''), rules = rules}
  end
  memo = QUOTA_MEMO
  if memo.n >= QUOTA_MEMO_MAX then memo.k, memo.r, memo.n = {}, {}, 0 end
  local top = risk and memo.r or memo.k
  by = top[key]
  if by == nil then by = {}; top[key] = by end
  by[v], memo.n = e, memo.n + 1
  return e
end

-- quota_buckets is the bucket strings of the windows at now ({m, h, d, t}),
-- formatted once a minute.
local function quota_buckets(now)
  local mn = math.floor(now / 60000)
  local b = QUOTA_MEMO.b
  if b.mn ~= mn then
    local d = string.format('%d', math.floor(now / 86400000))
    b = {mn = mn, m = string.format('%d', mn), h = string.format('%d', math.floor(now / 3600000)), d = d, t = d}
    QUOTA_MEMO.b = b
  end
  return b
end

-- The plan of a call (quota_plan, quota_count) keeps its rules and counters
-- in two flat arrays, not a table each (a reserve's allocations feed the Lua
-- collector, a large part of its cost):
--   rules, RS slots per rule: the rule (QUOTA_MEMO's, read only), step (1
--     the risk class's, 2 the kind's), counter (its slot base in counters,
--     false = a per_run rule without a run id), scope;
--   counters, CS slots per counter: id (the day hash field, or the per_run
--     counter's key), bucket (string; false for per_run), used (number), thr,
--     the slot base of the first rule counting it.
local RS, CS = 4, 5

-- quota_pick appends to rules the applying quotas of the highest-priority
-- matching policy (gline: policy_terms' terms.gline) with quotas in the
-- memo entry e (quota_rules), as step st; returns that policy's id (nil:
-- none). memo keeps the call's decoded policy keys (keys_json) for quotas
-- with allowlists.
local function quota_pick(rules, e, st, gline, keys_json, memo)
  if e == nil then return nil end
  for _, l in ipairs(e.lines) do
    local g = gline[l.ln]
    if g and l.q then
      for _, q in ipairs(l.rules) do
        local ok_ = true
        if q.fs then
          if memo.keys == nil then memo.keys = jdecode(keys_json) or {} end
          for _, a in ipairs(q.fs) do
            local val = memo.keys[a[2]]
            if type(val) ~= 'string' or val == '' then val = false end
            if not a[1][val] then ok_ = false end
          end
        end
        if ok_ then
          local n = #rules
          rules[n + 1], rules[n + 2], rules[n + 3], rules[n + 4] = q, st, false, false
        end
      end
      return g.id
    end
  end
  return nil
end

-- quota_extra is a rule's per_run TTL ms and threshold basis points (strings).
local function quota_extra(q)
  return string.match(q.x, '^(%d+),(%d+)')
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
--   plan, nil                     the counters a live ALLOW must count
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
  local ek = quota_rules(pk, kind, false)
  -- Step 1: the access lists of the highest-priority matching policy that has any.
  for _, g in ipairs(gov) do
    if g.f ~= 'Q' then
      local mark = ek and ek.marks[g.i]
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
  local rules, memo = {}, {}
  local pols = {quota_pick(rules, quota_rules(pr, risk, true), 1, terms.gline, keys_json, memo), false}
  pols[2] = quota_pick(rules, ek, 2, terms.gline, keys_json, memo) or false
  if #rules == 0 then return nil, nil end
  -- The counter of every applying rule: calendar ones read by one HMGET of
  -- the day hash, per_run ones by one HMGET each. Nothing is written here.
  local counters, fields = {}, {'_'}
  local bk = quota_buckets(now)
  for r = 1, #rules, RS do
    local q = rules[r]
    local c = q.c
    local sc = (c == 't') and tenant_scope or scope_path
    rules[r + 3] = sc
    local id, b = nil, false
    if c == 'r' then
      if run_id ~= '' then
        id = key_quota_counter(prefix, sc, (rules[r + 1] == 1) and ('__risk__:' .. risk) or kind, 'per_run', run_id)
      end
    else
      id = q.ids[sc]
      if id == nil then
        id = sc .. q.sfx
        quota_memo_put(q.ids, sc, id)
      end
      b = bk[c]
    end
    if id then
      local j = nil
      for k = 1, #counters, CS do
        if counters[k] == id then j = k; break end
      end
      if j == nil then
        j = #counters + 1
        counters[j], counters[j + 1], counters[j + 2], counters[j + 3], counters[j + 4] = id, b, 0, false, r
        if b then
          fields[#fields + 1] = id
        else
          local v = redis.call('HMGET', id, 'n', 'thr')
          counters[j + 2], counters[j + 3] = tonumber(v[1] or '0') or 0, v[2]
        end
      end
      rules[r + 2] = j
    end
  end
  local plan = {rules = rules, counters = counters, pols = pols, kind = kind, risk = risk, run = run_id}
  if #fields > 1 then
    local day = bk.d
    plan.day, plan.dkey = day, key_quota_day(prefix, day)
    local v = redis.call('HMGET', plan.dkey, unpack(fields))
    plan.dnew = not v[1]
    local j = 1
    for i = 2, #fields do
      while counters[j + 1] == false do j = j + CS end
      local raw = v[i]
      if raw then
        local b, n, thr = string.match(raw, '^(%d+):(%d+):(1?):')
        if b == counters[j + 1] then counters[j + 2], counters[j + 3] = tonumber(n), thr end
      end
      j = j + CS
    end
  end
  -- Evaluate in step order (a refusal of the risk-class step comes first).
  for st = 1, 2 do
    local worst, wu = nil, 0
    for r = 1, #rules, RS do
      if rules[r + 1] == st then
        local j = rules[r + 2]
        if not j then
          return nil, {code = 'INVALID_REQUEST', field = 'subject.dimensions.run_id',
            msg = 'subject.dimensions.run_id is required: a per_run quota of policy ' .. pols[st] .. ' applies'}
        end
        local used, m = counters[j + 2], rules[r].m
        if used >= m and (worst == nil or m - used < rules[worst].m - wu) then worst, wu = r, used end
      end
    end
    if worst then
      local q, j, rc = rules[worst], rules[worst + 2], (st == 1) and risk or nil
      local c = q.c
      local w = POLICY_WNAME[c]
      local v = {q = {w = w, m = q.m}, used = wu, pol = pols[st], sc = rules[worst + 3], kind = kind, rc = rc,
        wk = (c == 'r') and run_id or quota_wkey(c, tonumber(counters[j + 1]))}
      local what = rc and ('risk-class quota ' .. rc) or ('action quota ' .. kind)
      return nil, {code = 'ACTION_QUOTA_EXCEEDED', dd = quota_deny(v),
        msg = what .. ' ' .. w .. ' limit ' .. v.q.m .. ' reached at ' .. v.sc}
    end
  end
  if #counters == 0 then return nil, nil end
  return plan, nil
end

-- quota_crossed emits quota.threshold_approaching for the counter of rule r
-- reaching n.
local function quota_crossed(emit, tenant, plan, r, n, wk)
  local rules = plan.rules
  local q, st = rules[r], rules[r + 1]
  local _, bp = quota_extra(q)
  emit('quota.threshold_approaching', 'policy', rules[r + 3], {
    tenant_id = tenant, scope = rules[r + 3], action_kind = (st == 1) and '__risk__' or plan.kind,
    risk_class = (st == 1) and plan.risk or nil, window = POLICY_WNAME[q.c], window_key = wk, used = n,
    limit = q.m, threshold_pct = tonumber(bp) / 10000, policy_id = plan.pols[st],
  })
end

-- quota_count writes the counts of a live ALLOW (every counter of plan +1;
-- the calendar ones in one HSET of the day hash, whose expiry and index
-- entry are written by the day's first count only; per_run ones with their
-- TTL refreshed) and returns the keys of the per_run counters (the
-- reservation keeps them: release and expiry give those calls back, see
-- quota_refund in lib/refund.lua). A counter's limit and policy are those of
-- the first rule counting it.
-- emit is the script's emitter: a count reaching a quota's threshold emits
-- quota.threshold_approaching (category policy) once per window instance.
local function quota_count(plan, now, emit, tenant, prefix)
  local runs, set = {}, {}
  local idx = nil
  local now_s = ms(now)
  local rules, counters = plan.rules, plan.counters
  local function index(key, exp_s)
    if idx == nil then
      idx = key_quota_index(prefix)
      -- Bounded upkeep: index entries whose counters have expired.
      redis.call('ZREMRANGEBYSCORE', idx, '-inf', '(' .. now_s)
    end
    redis.call('ZADD', idx, exp_s, key)
  end
  for j = 1, #counters, CS do
    local id, b, used, thr, r = counters[j], counters[j + 1], counters[j + 2], counters[j + 3], counters[j + 4]
    local n, q, st = used + 1, rules[r], rules[r + 1]
    local pol = plan.pols[st]
    -- The crossing, once per window instance: thr marks it emitted (a count
    -- given back and taken again does not alert twice).
    local tn = q.tn
    local crossed = (not thr or thr == '') and used < tn and n >= tn
    if b then
      -- '<bucket>:<n>:<thr>:<at>:<limit>:<policy id>', the limit and policy
      -- part kept per rule and policy (QUOTA_MEMO).
      local tail = q.tails[pol]
      if tail == nil then
        tail = ':' .. q.ms .. ':' .. pol
        quota_memo_put(q.tails, pol, tail)
      end
      set[#set + 1] = id
      set[#set + 1] = b .. ':' .. n .. ((crossed or thr == '1') and ':1:' or '::') .. now_s .. tail
      if crossed then quota_crossed(emit, tenant, plan, r, n, quota_wkey(q.c, tonumber(b))) end
    else
      local ttl = quota_extra(q)
      local exp_s = ms(now + tonumber(ttl))
      if used == 0 then
        redis.call('HSET', id, 'n', n, 'at', now_s, 'lim', q.ms, 'pol', pol, 'exp', exp_s, 'sc', rules[r + 3],
          'k', (st == 1) and '__risk__' or plan.kind, 'rc', (st == 1) and plan.risk or '', 'w', 'per_run', 'wk', plan.run,
          'ttl', ttl)
      else
        redis.call('HSET', id, 'n', n, 'at', now_s, 'lim', q.ms, 'pol', pol, 'exp', exp_s)
      end
      redis.call('PEXPIREAT', id, exp_s)
      index(id, exp_s)
      runs[#runs + 1] = id
      if crossed then
        redis.call('HSET', id, 'thr', '1')
        quota_crossed(emit, tenant, plan, r, n, plan.run)
      end
    end
  end
  if #set > 0 then
    if plan.dnew then
      local exp_s = ms((tonumber(plan.day) + 1) * 86400000 + QUOTA_GRACE_MS)
      set[#set + 1], set[#set + 2] = '_', exp_s
      redis.call('HSET', plan.dkey, unpack(set))
      redis.call('PEXPIREAT', plan.dkey, exp_s)
      index(plan.dkey, exp_s)
    else
      redis.call('HSET', plan.dkey, unpack(set))
    end
  end
  return runs
end
