-- lib/policy.lua: a tenant's scope policies (docs/protocol.md#policies).
-- Included with "-- include: lib/policy.lua" (see internal/script).
--
-- Storage: every policy is one field of the tenant's policies hash
-- ("cy:{t:T}:pol", field = policy id, value = the policy as JSON, written by
-- internal/policy). The runtime never reads that hash: the mutation scripts
-- keep a compiled copy of the ACTIVE policies in the tenant record's `pol`
-- field, which the reserve and decide scripts already read with the tenant
-- defaults (lib/ledger_tenant.lua), so a tenant without policies costs no
-- extra Redis call. The compiled copy is a JSON array in evaluation order
-- (priority descending, then created_at, then id) of
--   {lua pattern, effective_from_ms, effective_until_ms (0 = none),
--    caps JSON or '', overage policy or '', default_ttl_ms (0 = none),
--    max_ttl_ms (0 = none), max_extensions (-1 = none), governance}
-- where governance is 0 (none) or the v0.1.26 rules (policy_gov below):
--   {id = policy id, a = allowlist set {kind = 1} or nil, d = denylist set,
--    aq = {kind = {quota, ...}} or nil, rq = {risk class = {quota, ...}} or nil}
-- and a quota is {w = window, m = max_calls, t = per_run TTL ms (0 else),
--   b = threshold basis points, h / r / y = host / recipient domain /
--   resource type allowlist sets or nil}. lib/quota.lua enforces them.

-- policy_set is the set of a non-empty list (nil when empty or absent).
local function policy_set(l)
  if type(l) ~= 'table' or next(l) == nil then return nil end
  local s = {}
  for _, v in ipairs(l) do s[v] = 1 end
  return s
end

-- policy_quotas groups a stored quota list by field (action_kind or risk_class).
local function policy_quotas(l, field)
  if type(l) ~= 'table' or next(l) == nil then return nil end
  local out = {}
  for _, q in ipairs(l) do
    local k = q[field]
    if out[k] == nil then out[k] = {} end
    local c = {w = q.window, m = q.max_calls, t = q.ttl_ms or 0, b = q.threshold_bp or 8000}
    c.h, c.r, c.y = policy_set(q.hosts), policy_set(q.domains), policy_set(q.resources)
    out[k][#out[k] + 1] = c
  end
  return out
end

-- policy_gov is the compiled v0.1.26 rules of stored policy p, 0 when none.
local function policy_gov(p)
  local g = {id = p.policy_id, a = policy_set(p.allowed_action_kinds), d = policy_set(p.denied_action_kinds),
    aq = policy_quotas(p.action_quotas, 'action_kind'), rq = policy_quotas(p.risk_class_quotas, 'risk_class')}
  if g.a == nil and g.d == nil and g.aq == nil and g.rq == nil then return 0 end
  return g
end

-- policy_compile returns the compiled copy of the policies hash pols
-- (field -> JSON, as hmap returns it), or '' when none is ACTIVE; nil and a
-- message when a stored policy is malformed.
local function policy_compile(pols)
  local list = {}
  for id, raw in pairs(pols) do
    local okd, p = pcall(cjson.decode, raw)
    if not okd or type(p) ~= 'table' then return nil, 'stored policy ' .. id .. ' is malformed' end
    if p.status == 'ACTIVE' then list[#list + 1] = p end
  end
  if #list == 0 then return '' end
  table.sort(list, function(a, b)
    if a.priority ~= b.priority then return a.priority > b.priority end
    if a.created_at_ms ~= b.created_at_ms then return a.created_at_ms < b.created_at_ms end
    return a.policy_id < b.policy_id
  end)
  local out = {}
  for i, p in ipairs(list) do
    out[i] = {p.lua_pattern, p.effective_from_ms or 0, p.effective_until_ms or 0, p.caps or '',
      p.commit_overage_policy or '', p.default_ttl_ms or 0, p.max_ttl_ms or 0, p.max_extensions or -1, policy_gov(p)}
  end
  return cjson.encode(out)
end

-- policy_terms evaluates the compiled policies against a scope path at now:
-- every field is taken from the first (highest-priority) matching policy in
-- its effective window that sets it. Returns nil when none matches (the fast
-- path: no policy), else a table {caps, overage, default_ttl, max_ttl,
-- max_ext, gov} with absent fields nil (gov: the v0.1.26 rules of the
-- matching policies, highest priority first); nil and a message when compiled is
-- malformed (the caller fails closed).
local function policy_terms(compiled, scope_path, now)
  if compiled == nil or compiled == '' then return nil end
  local okd, list = pcall(cjson.decode, compiled)
  if not okd or type(list) ~= 'table' then return nil, 'the tenant record has malformed compiled policies' end
  local t, hit = {}, false
  for _, p in ipairs(list) do
    if (p[2] == 0 or now >= p[2]) and (p[3] == 0 or now < p[3]) and string.find(scope_path, p[1]) then
      hit = true
      if t.caps == nil and p[4] ~= '' then t.caps = p[4] end
      if t.overage == nil and p[5] ~= '' then t.overage = p[5] end
      if t.default_ttl == nil and p[6] > 0 then t.default_ttl = p[6] end
      if t.max_ttl == nil and p[7] > 0 then t.max_ttl = p[7] end
      if t.max_ext == nil and p[8] >= 0 then t.max_ext = p[8] end
      if type(p[9]) == 'table' then
        if t.gov == nil then t.gov = {} end
        t.gov[#t.gov + 1] = p[9]
      end
    end
  end
  if not hit then return nil end
  return t
end

-- policy_emit appends policy.<what> (created, updated) for stored policy p to
-- the tenant's event stream; changed is the list of patched field names (nil
-- on create).
local function policy_emit(events_key, ectx_json, what, p, changed)
  if changed ~= nil and next(changed) == nil then changed = nil end
  event_emitter(events_key, ectx_json, now_ms())('policy.' .. what, 'policy', 'tenant:' .. p.tenant_id,
    {policy_id = p.policy_id, name = p.name or '', status = p.status or '', changed_fields = changed})
end
