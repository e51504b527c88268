-- lib/quota.lua: the v0.1.26 action governance of the reserve and decide
-- scripts (docs/protocol.md#v0126-action-governance): access lists, then
-- risk-class quotas, then per-kind quotas, all before the budget checks, and
-- the counter writes of a live ALLOW. Included with "-- include: lib/quota.lua".
-- include: lib/ledger_util.lua lib/keys.lua lib/policy.lua lib/correlation.lua lib/civil.lua
--
-- Counters live in the tenant's hash slot, named from the tenant prefix.
-- Calendar windows (per_minute, per_hour, per_day, per_tenant_per_day): one
-- hash per tenant and UTC day of Redis TIME (key_quota_day:
-- <prefix>qd:<day number>), so one HMGET reads and one HSET writes every
-- calendar counter a call touches. A counter is the field
--   <scope>|<counted>|<window code>      (counted: the kind, or
--                                         __risk__:<class>; POLICY_WCODE)
-- holding one integer, ((n * 2 + thr) * 131072 + at) * 2048 + bucket,
-- written in hexadecimal (lib/quota_read.lua quota_value), so the hot path
-- reads it with one tonumber(v, 16) and writes it with one string.format:
-- n the calls counted in
-- the window instance (at most 100,000 by the quota bounds, so the value
-- stays an exact integer below 2^53), thr 1 once
-- quota.threshold_approaching was emitted for it, at the second of the UTC
-- day of the last count (Redis TIME), bucket the window instance's number in
-- the day (Redis TIME ms / the window's length, minus the day's first; below
-- 1,440). A counter's limit and policy id are not written by a count: the
-- listing and the reset derive them from the current policies
-- (QUOTA_MEMO.meta), so a new scope path adds only its counter fields.
-- Except for a per_tenant_per_day counter (at the tenant scope, counted
-- under the rules that match each call's scope path, which the tenant scope
-- may not match): the field plus '@' holds '<limit>:<policy id>', written
-- by its first count in the day and once a day by each template. A value
-- of an earlier bucket reads as 0 (the window rolled over) and is
-- overwritten by the next count. Every window divides the UTC day, so a
-- bucket never spans two day hashes. Field '_' holds when the hash expires (the day's end plus
-- QUOTA_GRACE_MS) followed by 520 spaces: it is written, with PEXPIREAT and
-- the index entry, by the first count of the day only, and its length (past
-- any hash-max-listpack-value, 64 by default, 256 as docs/operations.md
-- suggests) makes the day hash a hash table from its creation. As a
-- listpack (every field and value within that limit: short scope paths)
-- it would stay one up to hash-max-listpack-entries fields (128 in the
-- stock redis.conf, 512 compiled in), and each field a reserve reads or
-- writes would be a linear scan of them: up to ~30k instructions each
-- (BENCHMARKS.md, "A new agent's names"). A counter is live while its bucket's end plus
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

-- quota_wkey is the spec's window key of calendar bucket b (a number) of
-- window code w: "2026-04-09T14:32", "2026-04-09T14" or "2026-04-09".
local function quota_wkey(w, b)
  local ms_ = b * QUOTA_LEN[w]
  local days = math.floor(ms_ / 86400000)
  local y, mo, d = civil_date(days)
  local key = string.format('%04d-%02d-%02d', y, mo, d)
  local rest = ms_ - days * 86400000
  if w == 'h' then
    key = key .. string.format('T%02d', math.floor(rest / 3600000))
  elseif w == 'm' then
    key = key .. string.format('T%02d:%02d', math.floor(rest / 3600000), math.floor((rest % 3600000) / 60000))
  end
  return key
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
-- ({{set, policy key name}, ...}; nil: none), sfx = '|<counted>|<c>' (the
-- day hash field of a scope S is S .. sfx), cnt = <counted>}. An entry is a
-- pure function of what is counted and the value's text, so it is never
-- stale, and nothing in it depends on a scope path. memo.p holds the
-- templates (below). memo.b holds the buckets of the current minute.
-- Bounded: past memo.max entries it starts over. Its helpers are fields,
-- not locals: the reserve script's chunk is near the embedded store's
-- register limit.
local QUOTA_MEMO = {k = {}, r = {}, p = {}, n = 0, b = {}, max = 2048}

-- QUOTA_MEMO.rules is the memo entry of compiled value v ('' = none: nil) of the
-- rules naming key (a kind, or with risk a risk class).
function QUOTA_MEMO.rules(v, key, risk)
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
      local r = {c = c, m = tonumber(m), ms = m, tn = tonumber(tn), x = x, sfx = '|' .. counted .. '|' .. c, cnt = counted}
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
  if memo.n >= QUOTA_MEMO.max then memo.k, memo.r, memo.p, memo.n = {}, {}, {}, 0 end
  local top = risk and memo.r or memo.k
  by = top[key]
  if by == nil then by = {}; top[key] = by end
  by[v], memo.n = e, memo.n + 1
  return e
end

-- QUOTA_MEMO.buckets is the buckets of the windows at now: {m, h, d, t} their
-- numbers in the UTC day, a = {m, h, d, t} the bucket numbers, day the day
-- number (a string); computed once a minute.
function QUOTA_MEMO.buckets(now)
  local b = QUOTA_MEMO.b
  -- The same minute as the last call's (the common case: two comparisons).
  if b.mn and now >= b.ms and now < b.ms + 60000 then return b end
  local mn = math.floor(now / 60000)
  if b.mn ~= mn then
    local d, h = math.floor(now / 86400000), math.floor(now / 3600000)
    b = {mn = mn, ms = mn * 60000, m = mn - d * 1440, h = h - d * 24, d = 0, t = 0, a = {m = mn, h = h, d = d, t = d},
      day = string.format('%d', d)}
    QUOTA_MEMO.b = b
  end
  return b
end

-- The plan of a call has a static part, its template (what applies and
-- which counters, by name stem: nothing in it depends on the scope path;
-- kept in QUOTA_MEMO.p when it depends only on memoized inputs: stable
-- terms, the kind's and the class's memo entries, no quota allowlist), and
-- what the call fills in: the counter names (the scope path or the tenant
-- scope, plus the stem) and the counts it reads:
--   tpl.rules, RS slots per rule: the rule (QUOTA_MEMO's, read only), step
--     (1 the risk class's, 2 the kind's), counter (its index), and whether
--     it counts at the tenant scope (per_tenant_per_day) instead of the
--     scope path;
--   tpl.ccode[j], cr[j], ctn[j], cmin[j], ctail[j], csfx[j], ccnt[j], ct[j]:
--     counter j's window code, the slot of the first rule counting it,
--     that rule's threshold count, the least max_calls of the rules
--     counting it, its '@' field's value (tenant-scope counters), its day
--     hash field's stem, what it counts (a kind or __risk__:<class>), and
--     whether it is the tenant scope's; tpl.tj the indexes of the
--     tenant-scope calendar counters and tpl.tk their positions in field
--     order, tpl.mw[j] the day in which this template last wrote counter
--     j's '@' field; tpl.cal the indexes of the calendar counters in field
--     order (tpl.fields[k] is counter cal[k]'s; tpl.ncal of them),
--     tpl.amin[j] the least of cmin[j] and ctn[j] (below it a count only
--     adds one: no limit, no threshold to look at), tpl.ath[k] the same for
--     calendar counter k as a value's high part (quota_plan); tpl.pk[i],
--     tpl.ps[i] the positions in field order and the stems of the calendar
--     counters at the scope path (a new scope path renames only those);
--   filled per call (arrays reused, no table per call): tpl.cid[j] true
--     for a calendar counter, a per_run counter's key (false: without a
--     run id); tpl.fields the calendar fields (one HMGET); tpl.set the HSET
--     arguments of the calendar counts (fields, then the values each call
--     writes in place); tpl.hi[k] the high part of calendar counter k's
--     value as read (with the threshold bit a crossing sets), tpl.used the
--     counts (per_run ones as read; calendar ones only when a counter is at
--     a limit, or crossed a threshold), tpl.thr the per_run counters' thr
--     fields; tpl.plan the plan (crossed: the counters whose threshold
--     this count crosses, dnew; kind, risk and run only when a crossing or
--     a per_run counter needs them); tpl.lsp, tpl.lts: the scope path and
--     tenant scope of the last call (the same again: those calendar names
--     stand); per minute (QUOTA_MEMO.minute): tpl.bk the buckets, tpl.kb[k]
--     calendar counter k's bucket number, tpl.day, tpl.dkey the day hash;
--     tpl.nrun: the per_run counters.
local RS = 4

-- quota_pick appends to rules the applying quotas of the highest-priority
-- matching policy (gline: policy_terms' terms.gline) with quotas in the
-- memo entry e (QUOTA_MEMO.rules), as step st; returns that policy's id (nil:
-- none) and whether a quota allowlist was consulted. memo keeps the call's
-- decoded policy keys (keys_json) for quotas with allowlists.
local function quota_pick(rules, e, st, gline, keys_json, memo)
  if e == nil then return nil end
  local lines = e.lines
  for i = 1, #lines do
    local l = lines[i]
    local g = gline[l.ln]
    if g and l.q then
      local qs = l.rules
      for k = 1, #qs do
        local q, ok_ = qs[k], true
        if q.fs then
          memo.used = true
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

-- QUOTA_MEMO.template builds the template of a call (see above); nil when no
-- rule applies; nil and a refusal from the access lists; and whether it
-- may be kept.
function QUOTA_MEMO.template(terms, ek, er, kind, keys_json, scope_path)
  local gov = terms.gov
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
  -- highest-priority matching policy that has rules for it.
  local rules, memo = {}, {}
  local pols = {quota_pick(rules, er, 1, terms.gline, keys_json, memo) or false, false}
  pols[2] = quota_pick(rules, ek, 2, terms.gline, keys_json, memo) or false
  local keep = terms.stable and not memo.used
  if #rules == 0 then return nil, nil, keep end
  local tpl = {rules = rules, pols = pols, cid = {}, ccode = {}, cr = {}, ctn = {}, cmin = {}, ctail = {}, csfx = {},
    ccnt = {}, ct = {}, tj = {}, mw = {}, fields = {}, set = {}, used = {}, thr = {}, nrun = 0, cal = {}, amin = {},
    ath = {}, kb = {}, hi = {}, tk = {}, ncal = 0}
  tpl.plan = {tpl = tpl}
  local ccode, csfx = tpl.ccode, tpl.csfx
  for r = 1, #rules, RS do
    local q, st = rules[r], rules[r + 1]
    local c = q.c
    rules[r + 3] = (c == 't')
    -- One counter per stem: the scope (path or tenant) follows from the
    -- window code, which the stem ends with.
    local j = nil
    for k = 1, #csfx do
      if csfx[k] == q.sfx then j = k; break end
    end
    if j == nil then
      j = #csfx + 1
      ccode[j], csfx[j], tpl.ccnt[j], tpl.ct[j], tpl.cr[j], tpl.ctn[j], tpl.cmin[j] = c, q.sfx, q.cnt, (c == 't'), r, q.tn, q.m
      if c ~= 'r' then
        tpl.cid[j] = true
        tpl.set[#tpl.set + 1], tpl.set[#tpl.set + 2] = '', 0
        tpl.cal[#tpl.cal + 1] = j
        if c == 't' then tpl.tj[#tpl.tj + 1], tpl.tk[#tpl.tk + 1], tpl.ctail[j] = j, #tpl.cal, q.ms .. ':' .. pols[st] end
      else
        tpl.nrun = tpl.nrun + 1
      end
    end
    if q.m < tpl.cmin[j] then tpl.cmin[j] = q.m end
    rules[r + 2] = j
  end
  -- amin[j]: the count from which counter j needs a closer look (a limit
  -- or the threshold reached); below it a count only adds one.
  for j = 1, #ccode do
    tpl.amin[j] = math.min(tpl.cmin[j], tpl.ctn[j])
  end
  -- ath[k]: the same for calendar counter k as its value's high part
  -- (h, below): at or past it, counter cal[k] is at amin - 1 or more.
  tpl.ncal = #tpl.cal
  tpl.pk, tpl.ps = {}, {}
  for k = 1, tpl.ncal do
    local j = tpl.cal[k]
    tpl.ath[k] = (tpl.amin[j] - 1) * 536870912
    if not tpl.ct[j] then
      local i = #tpl.pk + 1
      tpl.pk[i], tpl.ps[i] = k, csfx[j]
    end
  end
  return tpl, nil, keep
end

-- QUOTA_MEMO.scope is the scope rule slot r of plan counts at.
function QUOTA_MEMO.scope(plan, r)
  local tpl = plan.tpl
  return tpl.rules[r + 3] and tpl.lts or tpl.lsp
end

-- QUOTA_MEMO.minute points template tpl at the buckets bk of a new minute:
-- each calendar counter's bucket number (tpl.kb, in field order) and, on a
-- new day, the day hash (tpl.day, tpl.dkey).
function QUOTA_MEMO.minute(tpl, bk, prefix)
  tpl.bk = bk
  for k = 1, tpl.ncal do tpl.kb[k] = bk[tpl.ccode[tpl.cal[k]]] end
  if tpl.day ~= bk.day then tpl.day, tpl.dkey = bk.day, key_quota_day(prefix, bk.day) end
end

-- QUOTA_MEMO.near looks at calendar counter k of tpl whose value's high
-- part h is at or past tpl.ath[k]: whether it refuses (over: its count at
-- a limit of its rules) and the threshold crossing, once per window
-- instance (the thr bit marks it emitted; it is set in the h returned, and
-- the counter noted in tpl.plan.crossed for the count to emit).
function QUOTA_MEMO.near(tpl, k, h, over)
  local j = tpl.cal[k]
  local x = h / 268435456
  local t = x % 2
  local n = (x - t) / 2
  local tn, plan = tpl.ctn[j], tpl.plan
  tpl.used[j] = n
  if t == 0 and n < tn and n + 1 >= tn then
    h = h + 268435456
    if not plan.crossed then plan.crossed = {} end
    plan.crossed[#plan.crossed + 1] = j
  end
  return h, over or n >= tpl.cmin[j]
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
-- The most restrictive violated rule (least headroom) of the first step
-- that has one refuses; otherwise every applying counter is counted once.
local function quota_plan(terms, pk, pr, kind, risk, run_id, keys_json, scope_path, tenant_scope, now, prefix)
  local gov = terms and terms.gov
  if gov == nil then return nil, nil end
  if risk == '' then
    return nil, {code = 'INVALID_REQUEST', field = 'action.kind',
      msg = kind .. ' is not a declared custom action kind (declare it with -custom-action-kinds)'}
  end
  -- The memo entries of the kind's and the class's rules (looked up here,
  -- parsed by QUOTA_MEMO.rules on a miss).
  local memo = QUOTA_MEMO
  local ek, er = memo.k[kind], memo.r[risk]
  ek, er = ek and ek[pk], er and er[pr]
  if ek == nil and pk ~= '' then ek = memo.rules(pk, kind, false) end
  if er == nil and pr ~= '' then er = memo.rules(pr, risk, true) end
  -- The template: kept per (terms, kind entry, class entry) when it may be.
  local byt = terms.stable and memo.p[terms]
  local bye = byt and byt[ek or 0]
  local tpl = bye and bye[er or 0]
  if tpl == nil then
    local refusal, keep
    tpl, refusal, keep = QUOTA_MEMO.template(terms, ek, er, kind, keys_json, scope_path)
    if refusal then return nil, refusal end
    tpl = tpl or false
    if keep then
      if memo.n >= QUOTA_MEMO.max then memo.k, memo.r, memo.p, memo.n = {}, {}, {}, 0 end
      byt = memo.p[terms]
      if byt == nil then byt = {}; memo.p[terms] = byt end
      bye = byt[ek or 0]
      if bye == nil then bye = {}; byt[ek or 0] = bye end
      bye[er or 0], memo.n = tpl, memo.n + 1
    end
  end
  if not tpl then return nil, nil end
  -- The counter names of this call: the scope (path, or the tenant's) and
  -- the stem; one string each, the only per-scope work. The same scopes as
  -- this template's last call: the calendar names stand.
  local cid, set, fields = tpl.cid, tpl.set, tpl.fields
  local over = false
  if tpl.lsp ~= scope_path then
    -- A new scope path (a new agent under one tenant: the tenant-scope
    -- names stand): its calendar names only (tpl.pk[i] their positions in
    -- field order, tpl.ps[i] their stems).
    tpl.lsp = scope_path
    local pk, ps = tpl.pk, tpl.ps
    for i = 1, #pk do
      local k, id = pk[i], scope_path .. ps[i]
      fields[k], set[2 * k - 1] = id, id
    end
  end
  if tpl.lts ~= tenant_scope then
    tpl.lts = tenant_scope
    local tk, csfx, tj = tpl.tk, tpl.csfx, tpl.tj
    for i = 1, #tk do
      local k, id = tk[i], tenant_scope .. csfx[tj[i]]
      fields[k], set[2 * k - 1] = id, id
    end
  end
  if tpl.nrun > 0 then
    local ccode = tpl.ccode
    for j = 1, #ccode do
      if ccode[j] == 'r' then
        if run_id ~= '' then
          cid[j] = key_quota_counter(prefix, scope_path, tpl.ccnt[j], 'per_run', run_id)
        else
          -- A per_run rule without a run id: evaluated (refused) below.
          cid[j], over = false, true
        end
      end
    end
  end
  -- The counts: calendar ones by one HMGET of the day hash, per_run ones by
  -- one HMGET each. Nothing is written here, but the values a count would
  -- write are put in tpl.set as they are read (the count writes them as
  -- they are; a refusal leaves them for the next call to overwrite).
  local used, thr = tpl.used, tpl.thr
  local plan = tpl.plan
  local bk = QUOTA_MEMO.b
  -- The same-minute check of QUOTA_MEMO.buckets, repeated here on purpose:
  -- nearly every call falls in the minute of the last one, and testing it
  -- inline saves a Lua function call (a frame, its arguments, the return)
  -- on the hot path. buckets keeps its own check so that it is right on
  -- its own, whoever calls it.
  if not (bk.ms and now >= bk.ms and now < bk.ms + 60000) then bk = QUOTA_MEMO.buckets(now) end
  plan.crossed = false
  local dnew, ncal = true, tpl.ncal
  if ncal > 0 then
    -- A new minute for this template: its counters' buckets (kb), and on
    -- a new day the day hash.
    if tpl.bk ~= bk then QUOTA_MEMO.minute(tpl, bk, prefix) end
    local v = redis.call('HMGET', tpl.dkey, unpack(fields))
    -- A value is ((n * 2 + thr) * 131072 + at) * 2048 + bucket (quota_value,
    -- inline), read as its high part h = (n * 2 + thr) * 268435456 (0: absent,
    -- or of an earlier bucket) and written as h plus one count (536870912),
    -- the second of the day (at) and the bucket. Below ath[k] a count only
    -- adds one; at or past it QUOTA_MEMO.near looks at the limit and the
    -- threshold.
    local sec = ((now - now % 1000) / 1000 % 86400) * 2048 + 536870912
    local fmt, tonum, kb, ath, hi = string.format, tonumber, tpl.kb, tpl.ath, tpl.hi
    for k = 1, ncal do
      local raw, h = v[k], 0
      if raw then
        dnew = false
        local x = tonum(raw, 16)
        if x then
          local lo = x % 268435456
          if lo % 2048 == kb[k] then h = x - lo end
        end
      end
      if h >= ath[k] then h, over = QUOTA_MEMO.near(tpl, k, h, over) end
      hi[k] = h
      -- The value a count writes, as a hexadecimal string (%x formats an
      -- integer far cheaper than Redis formats a Lua number, %.17g, and
      -- tonumber reads base 16 with strtoul, not strtod).
      set[2 * k] = fmt('%x', h + sec + kb[k])
    end
  end
  if tpl.nrun > 0 then
    local ccode, cmin = tpl.ccode, tpl.cmin
    for j = 1, #cid do
      if ccode[j] == 'r' then
        local n, t = 0, nil
        if cid[j] then
          local pv = redis.call('HMGET', cid[j], 'n', 'thr')
          n, t = tonumber(pv[1] or '0') or 0, pv[2]
        end
        used[j], thr[j] = n, t
        if n >= cmin[j] then over = true end
      end
    end
  end
  -- dnew: none of the calendar counters is in the day hash yet (its first
  -- count of the day, or theirs): the count sets the hash's expiry and
  -- index entry, again if other counters made the hash already.
  plan.dnew = dnew
  if plan.crossed or tpl.nrun > 0 then plan.kind, plan.risk, plan.run = kind, risk, run_id end
  -- Evaluate in step order (a refusal of the risk-class step comes first),
  -- only when a counter is at a limit of its rules (or a rule has none):
  -- then with the calendar counts taken from their high parts.
  local rules, pols = tpl.rules, tpl.pols
  if over then
    local cal, hi = tpl.cal, tpl.hi
    for k = 1, ncal do
      local h = hi[k]
      used[cal[k]] = (h - h % 536870912) / 536870912
    end
  end
  for st = 1, over and 2 or 0 do
    local worst, wu = nil, 0
    for r = 1, #rules, RS do
      if rules[r + 1] == st then
        local j = rules[r + 2]
        if not cid[j] then
          return nil, {code = 'INVALID_REQUEST', field = 'subject.dimensions.run_id',
            msg = 'subject.dimensions.run_id is required: a per_run quota of policy ' .. pols[st] .. ' applies'}
        end
        local u, m = used[j], rules[r].m
        if u >= m and (worst == nil or m - u < rules[worst].m - wu) then worst, wu = r, u end
      end
    end
    if worst then
      local q, rc = rules[worst], (st == 1) and risk or nil
      local c = q.c
      local w = POLICY_WNAME[c]
      local dv = {q = {w = w, m = q.m}, used = wu, pol = pols[st], sc = QUOTA_MEMO.scope(plan, worst), kind = kind, rc = rc,
        wk = (c == 'r') and run_id or quota_wkey(c, bk.a[c])}
      local what = rc and ('risk-class quota ' .. rc) or ('action quota ' .. kind)
      return nil, {code = 'ACTION_QUOTA_EXCEEDED', dd = quota_deny(dv),
        msg = what .. ' ' .. w .. ' limit ' .. dv.q.m .. ' reached at ' .. dv.sc}
    end
  end
  return plan, nil
end

-- QUOTA_MEMO.meta is the limit and policy id (strings; '0' and '' when no
-- rule applies now) of a calendar counter: the one of counted (a kind or
-- __risk__:<class>) and window code c at scope sc, under the tenant's
-- current policies, as quota_plan picks it: the first rule of that window
-- in the highest-priority matching policy that has rules for counted (a
-- quota allowlist is not evaluated: there is no call to match it against).
-- For the listing and the reset (reads only); key is the tenant record,
-- cache a table kept across one script's calls.
function QUOTA_MEMO.meta(key, sc, counted, c, now, cache)
  local risk = string.match(counted, '^__risk__:(.*)$')
  local f = risk and ('pr:' .. risk) or ('pk:' .. counted)
  if cache.pol == nil then cache.pol = redis.call('HGET', key, 'pol') or '' end
  if cache[f] == nil then cache[f] = redis.call('HGET', key, f) or '' end
  local e = QUOTA_MEMO.rules(cache[f], risk or counted, risk ~= nil)
  local terms = e and policy_terms(cache.pol, sc, now)
  local gline = terms and terms.gline
  if gline == nil then return '0', '' end
  for _, l in ipairs(e.lines) do
    local g = gline[l.ln]
    if g and l.q then
      for _, q in ipairs(l.rules) do
        if q.c == c then return q.ms, g.id end
      end
      return '0', ''
    end
  end
  return '0', ''
end

-- quota_crossed emits quota.threshold_approaching for the counter of rule
-- slot r reaching n, with the counter window's correlation id (CORR.quota).
local function quota_crossed(emit, tenant, plan, r, n, wk)
  local rules = plan.tpl.rules
  local q, st = rules[r], rules[r + 1]
  local _, bp = quota_extra(q)
  local sc = QUOTA_MEMO.scope(plan, r)
  emit('quota.threshold_approaching', 'policy', sc, {
    tenant_id = tenant, scope = sc, action_kind = (st == 1) and '__risk__' or plan.kind,
    risk_class = (st == 1) and plan.risk or nil, window = POLICY_WNAME[q.c], window_key = wk, used = n,
    limit = q.m, threshold_pct = tonumber(bp) / 10000, policy_id = plan.tpl.pols[st],
  }, CORR.quota(tenant, sc, (st == 1) and plan.risk or plan.kind, POLICY_WNAME[q.c], wk))
end

-- quota_count writes the counts of a live ALLOW (every counter of plan +1;
-- the calendar ones in one HSET of the day hash, whose expiry and index
-- entry are written by the day's first count only; per_run ones with their
-- TTL refreshed) and returns the keys of the per_run counters, nil when
-- none (the reservation keeps them: release and expiry give those calls
-- back, see quota_refund in lib/refund.lua). A counter's limit and policy are those of
-- the first rule counting it.
-- emit is the script's emitter: a count reaching a quota's threshold emits
-- quota.threshold_approaching (category policy) once per window instance,
-- with the tenant id taken from the tenant prefix (only then).
local function quota_count(plan, now, emit, prefix)
  local tpl = plan.tpl
  -- index enters a counter in the tenant's counter index; made only when
  -- one is (a day's first count, a per_run count), not on every call.
  local idx, index = nil, nil
  if plan.dnew or tpl.nrun > 0 then
    index = function(key, exp_s)
      if idx == nil then
        idx = key_quota_index(prefix)
        -- Bounded upkeep: index entries whose counters have expired.
        redis.call('ZREMRANGEBYSCORE', idx, '-inf', '(' .. ms(now))
      end
      redis.call('ZADD', idx, exp_s, key)
    end
  end
  local set, tenant = tpl.set, nil
  if tpl.ncal > 0 then
    -- The calendar counts (quota_plan put their values in tpl.set), with
    -- the '@' fields of the tenant-scope counters that may not hold this
    -- template's yet (its first count in the window instance: n 0, h
    -- below one count; or this template's first of the day), and the day's
    -- first count adds the expiry field. The extra pairs go after the
    -- counts and are taken off again.
    local tk, n0 = tpl.tk, #set
    for i = 1, #tk do
      local k, j = tk[i], tpl.tj[i]
      if tpl.hi[k] < 536870912 or tpl.mw[j] ~= tpl.day then
        set[#set + 1], set[#set + 2], tpl.mw[j] = tpl.fields[k] .. '@', tpl.ctail[j], tpl.day
      end
    end
    if plan.dnew then
      -- '_': the expiry, padded past hash-max-listpack-value so the day
      -- hash is a hash table from its first count (see the layout above).
      local exp_s, n = ms((tonumber(tpl.day) + 1) * 86400000 + QUOTA_GRACE_MS), #set
      set[n + 1], set[n + 2] = '_', exp_s .. string.rep(' ', 520)
      redis.call('HSET', tpl.dkey, unpack(set))
      redis.call('PEXPIREAT', tpl.dkey, exp_s)
      index(tpl.dkey, exp_s)
    else
      redis.call('HSET', tpl.dkey, unpack(set))
    end
    for k = #set, n0 + 1, -1 do set[k] = nil end
    if plan.crossed then
      local bk, ccode = tpl.bk, tpl.ccode
      tenant = key_tenant(prefix)
      for _, j in ipairs(plan.crossed) do
        local c = ccode[j]
        quota_crossed(emit, tenant, plan, tpl.cr[j], tpl.used[j] + 1, quota_wkey(c, bk.a[c]))
      end
    end
  end
  if tpl.nrun == 0 then return nil end
  -- per_run counters: one hash each, TTL refreshed.
  local rules, used, thr, now_s, runs = tpl.rules, tpl.used, tpl.thr, nil, {}
  local cid, ccode = tpl.cid, tpl.ccode
  tenant = tenant or key_tenant(prefix)
  for j = 1, #cid do
    if ccode[j] == 'r' then
      local id, r, u, t = cid[j], tpl.cr[j], used[j], thr[j]
      local q, st = rules[r], rules[r + 1]
      local n, tn, pol = u + 1, q.tn, tpl.pols[st]
      local crossed = (not t or t == '') and u < tn and n >= tn
      local ttl = quota_extra(q)
      local exp_s = ms(now + tonumber(ttl))
      now_s = now_s or ms(now)
      if u == 0 then
        redis.call('HSET', id, 'n', n, 'at', now_s, 'lim', q.ms, 'pol', pol, 'exp', exp_s, 'sc', QUOTA_MEMO.scope(plan, r),
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
  return runs
end
