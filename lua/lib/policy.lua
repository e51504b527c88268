-- lib/policy.lua: a tenant's scope policies (docs/protocol.md#policies).
-- Included with "-- include: lib/policy.lua" (see internal/script).
-- include: lib/policy_rate.lua lib/ledger_util.lua
--
-- Storage: every policy is one field of the tenant's policies hash
-- ("cy:{t:T}:pol", field = policy id, value = the policy as JSON, written by
-- internal/policy). The runtime never reads that hash: the mutation scripts
-- compile the ACTIVE policies once, at write time, into fields of the tenant
-- record that the reserve and decide scripts read in the same HMGET as the
-- tenant defaults (lib/ledger_tenant.lua), so a tenant without policies costs
-- no extra Redis call, and one with policies costs no JSON decode:
--   pol       the match table: 'P2\n', then one line per ACTIVE policy in
--             evaluation order (priority descending, then created_at, then id):
--             its Lua pattern, then the terms it sets as tagged items, all
--             TAB-separated, LF-terminated: 'w<from ms>,<until ms (0 = none)>'
--             (an effective window; first), 'g<flags>:<policy id>' (v0.1.26
--             rules; flags 'A' an allowlist, 'D' a denylist, 'Q' quotas),
--             'c<caps JSON>', 'o<overage policy>', 'd<default_ttl_ms>',
--             'm<max_ttl_ms>', 'e<max_extensions>'.
--   pk:<kind> the v0.1.26 rules that name an action kind, and
--   pr:<risk class> those that name a risk class: one line per policy that
--             names it, in evaluation order,
--               <policy line number> TAB <mark> [TAB <quota>]... LF
--             mark 'a' (in the allowlist), 'd' (in the denylist) or '';
--             quota '<window code>,<max_calls>,<threshold count>,<per_run
--             TTL ms>,<threshold basis points>[,<filters JSON>]' (window
--             codes POLICY_WCODE; threshold count: the least count at or
--             past the threshold;
--             filters {h, r, y}: the host / recipient domain / resource type
--             allowlists). A reserve reads only the two fields of its kind.
--   pkf       the pk:/pr: field names written, LF-separated (the next
--             compile deletes them).
--   prr, prc  the rate limits (lib/policy_rate.lua).
-- policy_terms gives lib/quota.lua what it enforces.

local POLICY_HEAD = 'P2\n'
-- POLICY_WCODE: the window codes of compiled quotas (and back, POLICY_WNAME).
local POLICY_WCODE = {per_minute_tumbling = 'm', per_hour_tumbling = 'h', per_day_tumbling = 'd',
  per_tenant_per_day = 't', per_run = 'r'}
local POLICY_WNAME = {m = 'per_minute_tumbling', h = 'per_hour_tumbling', d = 'per_day_tumbling',
  t = 'per_tenant_per_day', r = 'per_run'}

-- policy_set is the set of a non-empty list (nil when empty or absent).
local function policy_set(l)
  if type(l) ~= 'table' or next(l) == nil then return nil end
  local s = {}
  for _, v in ipairs(l) do s[v] = 1 end
  return s
end

-- policy_rules adds the v0.1.26 rules of stored policy p (line number i) to
-- rules (field name -> {line number -> {mark, quota...}}) and returns its
-- governance flags.
local function policy_rules(p, i, rules)
  local function entry(field)
    local byline = rules[field]
    if byline == nil then byline = {}; rules[field] = byline end
    local e = byline[i]
    if e == nil then e = {''}; byline[i] = e end
    return e
  end
  local flags = ''
  for _, l in ipairs({{p.allowed_action_kinds, 'a', 'A'}, {p.denied_action_kinds, 'd', 'D'}}) do
    if type(l[1]) == 'table' and next(l[1]) ~= nil then
      flags = flags .. l[3]
      for _, k in ipairs(l[1]) do entry('pk:' .. k)[1] = l[2] end
    end
  end
  local quotas = false
  for _, l in ipairs({{p.action_quotas, 'action_kind', 'pk:'}, {p.risk_class_quotas, 'risk_class', 'pr:'}}) do
    if type(l[1]) == 'table' then
      for _, q in ipairs(l[1]) do
        quotas = true
        -- tn: the count that reaches the threshold (the least n with
        -- n * 10000 >= max_calls * basis points), so the hot path compares counts.
        local bp = q.threshold_bp or 8000
        local c = POLICY_WCODE[q.window] .. ',' .. string.format('%d,%d,%d,%d', q.max_calls,
          math.ceil(q.max_calls * bp / 10000), q.ttl_ms or 0, bp)
        local f = {}
        for _, x in ipairs({{'h', q.hosts}, {'r', q.domains}, {'y', q.resources}}) do
          if type(x[2]) == 'table' and next(x[2]) ~= nil then f[x[1]] = x[2] end
        end
        if next(f) ~= nil then c = c .. ',' .. cjson.encode(f) end
        local e = entry(l[3] .. q[l[2]])
        e[#e + 1] = c
      end
    end
  end
  if quotas then flags = flags .. 'Q' end
  return flags
end

-- policy_compile returns the compiled fields of the policies hash pols
-- (field -> JSON, as hmap returns it): a table {pol = match table, pkf =
-- ..., ['pk:<kind>'] = ..., ...}, empty when no policy is ACTIVE; nil and a
-- message when a stored policy is malformed.
local function policy_compile(pols)
  local list = {}
  for id, raw in pairs(pols) do
    local okd, p = pcall(cjson.decode, raw)
    if not okd or type(p) ~= 'table' then return nil, 'stored policy ' .. id .. ' is malformed' end
    if p.status == 'ACTIVE' then list[#list + 1] = p end
  end
  if #list == 0 then return {} end
  table.sort(list, function(a, b)
    if a.priority ~= b.priority then return a.priority > b.priority end
    if a.created_at_ms ~= b.created_at_ms then return a.created_at_ms < b.created_at_ms end
    return a.policy_id < b.policy_id
  end)
  local lines, rules = {POLICY_HEAD}, {}
  for i, p in ipairs(list) do
    -- Only the terms a policy sets, each a tagged item.
    local items, flags = {p.lua_pattern}, policy_rules(p, i, rules)
    local from, till = p.effective_from_ms or 0, p.effective_until_ms or 0
    if from ~= 0 or till ~= 0 then items[#items + 1] = string.format('w%d,%d', from, till) end
    if flags ~= '' then items[#items + 1] = 'g' .. flags .. ':' .. p.policy_id end
    if (p.caps or '') ~= '' then items[#items + 1] = 'c' .. p.caps end
    if (p.commit_overage_policy or '') ~= '' then items[#items + 1] = 'o' .. p.commit_overage_policy end
    if (p.default_ttl_ms or 0) > 0 then items[#items + 1] = string.format('d%d', p.default_ttl_ms) end
    if (p.max_ttl_ms or 0) > 0 then items[#items + 1] = string.format('m%d', p.max_ttl_ms) end
    if (p.max_extensions or -1) >= 0 then items[#items + 1] = string.format('e%d', p.max_extensions) end
    if #items == 1 then items[2] = '' end
    lines[i + 1] = table.concat(items, '\t') .. '\n'
  end
  local out, names = {pol = table.concat(lines)}, {}
  for field, byline in pairs(rules) do
    local ls = {}
    for i = 1, #list do
      local e = byline[i]
      if e then ls[#ls + 1] = i .. '\t' .. table.concat(e, '\t') .. '\n' end
    end
    out[field] = table.concat(ls)
    names[#names + 1] = field
  end
  table.sort(names)
  if #names > 0 then out.pkf = table.concat(names, '\n') end
  local prr, prc = policy_rate.compile(list)
  if prr ~= '' then out.prr = prr end
  if prc ~= '' then out.prc = prc end
  return out
end

-- policy_name_taken is the refusal of a write that would give name to a
-- second of the tenant's policies pols (id -> stored JSON; self_id, if any, the
-- policy being written, is skipped), or of a malformed stored policy; nil
-- when the name is free.
local function policy_name_taken(pols, name, self_id)
  for id, raw in pairs(pols) do
    if id ~= self_id then
      local q = jdecode(raw)
      if q == nil then return fail('INTERNAL_ERROR', 'stored policy ' .. id .. ' is malformed') end
      if q.name == name then
        return fail('DUPLICATE_RESOURCE', 'the tenant has a policy named ' .. name, {field = 'name', policy_id = id})
      end
    end
  end
  return nil
end

-- policy_store replaces the compiled fields in the tenant record key with
-- compiled (policy_compile): the previous pk:/pr: fields (named by pkf) go.
local function policy_store(key, compiled)
  local old = redis.call('HGET', key, 'pkf')
  local del = {'pol', 'pkf', 'prr', 'prc'}
  if old then
    for f in string.gmatch(old, '[^\n]+') do del[#del + 1] = f end
  end
  redis.call('HDEL', key, unpack(del))
  local set = {}
  for f, v in pairs(compiled) do set[#set + 1] = f; set[#set + 1] = v end
  if #set > 0 then redis.call('HSET', key, unpack(set)) end
end

-- POLICY_BAD: the refusal message of a malformed match table.
local POLICY_BAD = 'the tenant record has malformed compiled policies'

-- policy_line applies the terms of a matching policy (line number i, its
-- tagged items rest) to t, each only where no earlier line set it; t
-- unchanged when the policy is outside its effective window at now; nil and
-- a message when rest is malformed.
local function policy_line(t, rest, i, now)
  for tag, v in string.gmatch(rest, '(%a)([^\t]*)') do
    if tag == 'w' then
      local from, till = string.match(v, '^(%d+),(%d+)$')
      if from == nil then return nil, POLICY_BAD end
      if now < tonumber(from) or (till ~= '0' and now >= tonumber(till)) then return t end
      t.hit = true
    elseif tag == 'g' then
      local flags, id = string.match(v, '^(%u+):(.+)$')
      if flags == nil then return nil, POLICY_BAD end
      local g = {i = string.format('%d', i), id = id, f = flags}
      if t.gov == nil then t.gov, t.gline = {}, {} end
      t.gov[#t.gov + 1] = g
      t.gline[g.i] = g
    elseif tag == 'c' then
      if t.caps == nil then t.caps = v end
    elseif tag == 'o' then
      if t.overage == nil then t.overage = v end
    elseif tag == 'd' then
      if t.default_ttl == nil then t.default_ttl = tonumber(v) end
    elseif tag == 'm' then
      if t.max_ttl == nil then t.max_ttl = tonumber(v) end
    elseif tag == 'e' then
      if t.max_ext == nil then t.max_ext = tonumber(v) end
    end
  end
  t.hit = true
  return t
end

-- POLICY_MEMO: what policy_terms derived from a match table, kept across
-- calls while the Functions library stays loaded (under EVALSHA every call
-- starts empty): memo.t[table] = {lines = {{pattern, tagged items, line
-- number, bit}, ...}, timed = any line has an effective window, sets =
-- {[match set] = the terms (false: none match), or with timed the matching
-- lines}}. A match set is which lines match a scope path: the sum of their
-- bits (2^(line number - 1)), exact up to POLICY_MEMO.bits lines, past that
-- the list of their numbers as a string. It depends on the table and on the
-- scope path only through its patterns, so a table has at most a few sets
-- however many scope paths a tenant's agents use (a stranger spreading over
-- scopes adds none), and an entry is a pure function of the table's text:
-- never stale. A call for an unseen scope path pays one pattern test per
-- line and a lookup. Bounded: past memo.max entries it starts over. Callers
-- must not change the terms they get. (Its helpers are fields, not locals:
-- the reserve script's chunk is near the embedded store's register limit.)
local POLICY_MEMO = {t = {}, n = 0, max = 1024, bits = 52}

-- POLICY_MEMO.fold applies the matching lines ms (each {pattern, items, line
-- number}) in order at now: the terms, nil when none applies, or nil and a
-- message when an item is malformed.
function POLICY_MEMO.fold(ms_, now)
  local t, err = {}, nil
  for _, l in ipairs(ms_) do
    if l[2] == '' then
      t.hit = true
    else
      t, err = policy_line(t, l[2], l[3], now)
      if t == nil then return nil, err end
    end
  end
  if not t.hit then return nil end
  return t
end

-- POLICY_MEMO.parse is the memo entry of match table compiled (nil and a
-- message when it is malformed).
function POLICY_MEMO.parse(compiled)
  if string.sub(compiled, 1, 3) ~= POLICY_HEAD then return nil, POLICY_BAD end
  local lines, i, pos, n, timed, every = {}, 0, 4, #compiled, false, true
  while pos <= n do
    local e = string.find(compiled, '\n', pos, true)
    local tab = e and string.find(compiled, '\t', pos, true)
    if tab == nil or tab > e then return nil, POLICY_BAD end
    i = i + 1
    local rest = string.sub(compiled, tab + 1, e - 1)
    -- 'w': an effective window (compiled as the first item).
    if string.byte(rest, 1) == 119 or string.find(rest, '\tw', 1, true) then timed = true end
    local l = {string.sub(compiled, pos, tab - 1), rest, i, 2 ^ (i - 1)}
    POLICY_MEMO.plain(l)
    if l[5] ~= 'a' then every = false end
    lines[i] = l
    pos = e + 1
  end
  return {lines = lines, timed = timed, sets = {}, wide = i > POLICY_MEMO.bits, every = every}
end

-- POLICY_MEMO.plain derives, once per match table, the test of line l's
-- Lua pattern (internal/policy Compile: '^' when anchored at the tenant,
-- '/'-joined '<level>:<value>' segments with '%'-escaped values, '[^/]+'
-- for a '*' value, '/.+' for a trailing '/*', then '$'; or '.' for '*')
-- that a call runs on the scope path without trying the pattern at every
-- position: l[5] its kind, l[6] its literal, l[7] the literal's length,
-- l[8] a pattern anchored where the literal is found:
--   a  every scope path
--   e  the path is the literal (no '*' value, anchored, no trailing '/*')
--   p  the path starts with the literal, which ends with '/' (anchored,
--      trailing '/*')
--   s  the path ends with the literal, which starts with '/' (unanchored)
--   c  the path holds the literal ('/' at both ends; unanchored, trailing)
--   w  a '*' value, unanchored: the literal (the pattern's text up to its
--      first wildcard, starting with '/<level>:') occurs at most once in a
--      scope path (levels are unique, values hold no '/' or ':'), so the
--      pattern is tried once, anchored where it is
--   l  a '*' value, anchored: the pattern itself (tried once: anchored)
function POLICY_MEMO.plain(l)
  local pat = l[1]
  if pat == '.' then l[5] = 'a'; return end
  local anchored = string.byte(pat, 1) == 94
  local body = string.sub(pat, anchored and 2 or 1, -2)
  local trail = string.sub(body, -3) == '/.+'
  if trail then body = string.sub(body, 1, -4) end
  local wild = string.find(body, '[', 1, true)
  if wild then
    if anchored then l[5] = 'l'; return end
    l[5], l[6], l[8] = 'w', string.gsub(string.sub(body, 1, wild - 1), '%%(.)', '%1'), '^' .. string.sub(pat, 1)
    return
  end
  local lit = string.gsub(body, '%%(.)', '%1')
  if anchored then
    if trail then l[5], l[6] = 'p', lit .. '/' else l[5], l[6] = 'e', lit end
  elseif trail then
    l[5], l[6] = 'c', lit .. '/'
  else
    l[5], l[6] = 's', lit
  end
  l[7] = #l[6]
end

-- POLICY_MEMO.hit is whether line l (POLICY_MEMO.plain) matches scope_path
-- (policy_terms runs the same tests inline).
function POLICY_MEMO.hit(l, scope_path)
  local k, find = l[5], string.find
  if k == 'a' then return true end
  if k == 'e' then return scope_path == l[6] end
  if k == 'p' then return find(scope_path, l[6], 1, true) == 1 end
  if k == 's' then
    local at = #scope_path - l[7] + 1
    return at > 1 and find(scope_path, l[6], at, true) ~= nil
  end
  if k == 'c' then return find(scope_path, l[6], 1, true) ~= nil end
  if k == 'w' then
    local at = find(scope_path, l[6], 1, true)
    return at ~= nil and find(scope_path, l[8], at) ~= nil
  end
  return find(scope_path, l[1]) ~= nil
end

-- policy_terms evaluates the match table (the tenant record's pol) against a
-- scope path at now: every field is taken from the first (highest-priority)
-- matching policy in its effective window that sets it. Returns nil when
-- none matches (the fast path: no policy), else a table {caps, overage,
-- default_ttl, max_ttl, max_ext, gov, gline} with absent fields nil (gov:
-- the matching policies with v0.1.26 rules, highest priority first, each
-- {i = line number (a string), id = policy id, f = flags}; gline: the same
-- by line number, what lib/quota.lua reads the pk:/pr: lines against); nil and a
-- message when the table is malformed (the caller fails closed). The answer
-- may be shared with later calls, for other scope paths too (POLICY_MEMO):
-- read it, never change it, and take no scope path from it.
-- Cost: the first call for a table splits it into lines and derives each
-- line's plain test (POLICY_MEMO.plain); every call runs each line's test
-- (a string comparison or one plain find: no string or table is made, no
-- pattern is tried at every position); the first call for a
-- match set folds its lines; after that, without effective windows, a
-- lookup (with them, the matching lines are applied at now).
local function policy_terms(compiled, scope_path, now)
  if compiled == nil or compiled == '' then return nil end
  local memo = POLICY_MEMO
  local m = memo.t[compiled]
  if m == nil then
    local err
    m, err = memo.parse(compiled)
    if m == nil then return nil, err end
    if memo.n >= memo.max then memo.t, memo.n = {}, 0 end
    memo.t[compiled], memo.n = m, memo.n + 1
  end
  -- The same scope path as the last call's, or a table whose every line
  -- matches every scope path (m.every: '*' policies only, so the match set
  -- never changes), without effective windows: the last answer (m.lres,
  -- false for none).
  local last = m.lsp == scope_path or (m.every and m.lset ~= nil)
  if last and m.lres ~= nil then return m.lres or nil end
  -- The match set: POLICY_MEMO.hit, inline (the commonest kinds first);
  -- the last call's when the scope path is the same (one entry, not a
  -- memo per scope path).
  local lines, set, find, n = m.lines, 0, string.find, #scope_path
  if last then set = m.lset end
  for i = 1, last and 0 or #lines do
    local l = lines[i]
    local k, hit = l[5], false
    if k == 'p' then
      hit = find(scope_path, l[6], 1, true) == 1
    elseif k == 's' then
      local at = n - l[7] + 1
      hit = at > 1 and find(scope_path, l[6], at, true) ~= nil
    elseif k == 'a' then
      hit = true
    else
      hit = POLICY_MEMO.hit(l, scope_path)
    end
    if hit then set = set + l[4] end
  end
  if m.wide and set ~= 0 and not last then
    -- Past 52 lines a sum of bits is no longer exact: the line numbers.
    local ns = {}
    for i = 1, #lines do
      if POLICY_MEMO.hit(lines[i], scope_path) then ns[#ns + 1] = i end
    end
    set = table.concat(ns, ',')
  end
  m.lsp, m.lset, m.lres = scope_path, set, nil
  local s = m.sets[set]
  if s == nil then
    local ms_ = {}
    if set ~= 0 then
      for _, l in ipairs(lines) do
        if POLICY_MEMO.hit(l, scope_path) then ms_[#ms_ + 1] = l end
      end
    end
    if m.timed then
      s = ms_
    else
      local err
      s, err = POLICY_MEMO.fold(ms_, now)
      if err then return nil, err end
      -- stable: the same answer for every call with this match set
      -- (lib/quota.lua keys its own memo on it).
      if s then s.stable = true end
      s = s or false
    end
    if memo.n >= memo.max then memo.t, memo.n, m.sets = {[compiled] = m}, 1, {} end
    m.sets[set], memo.n = s, memo.n + 1
  end
  if m.timed then
    if s[1] == nil then return nil end
    return POLICY_MEMO.fold(s, now)
  end
  m.lres = s
  return s or nil
end

-- policy_emit appends policy.<what> (created, updated) for stored policy p to
-- the tenant's event stream; changed is the list of patched field names (nil
-- on create).
local function policy_emit(events_key, ectx_json, what, p, changed)
  if changed ~= nil and next(changed) == nil then changed = nil end
  event_emitter(events_key, ectx_json, now_ms())('policy.' .. what, 'policy', 'tenant:' .. p.tenant_id,
    {policy_id = p.policy_id, name = p.name or '', status = p.status or '', changed_fields = changed})
end
