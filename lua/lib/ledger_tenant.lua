-- lib/ledger_tenant.lua: reading the tenant record (status guard, TTL/extension/policy defaults).
-- Included by ledger scripts with "-- include: lib/ledger_tenant.lua" (see internal/script).
-- include: lib/ledger_util.lua

local TENANT_STATUSES = {ACTIVE = true, SUSPENDED = true, CLOSED = true}

-- The tenant fields the runtime reads (HMGET of these six rather than
-- HGETALL of all of them: a fraction of the reply to convert on every
-- reserve, commit and decide). `pol` is the compiled copy of the tenant's
-- ACTIVE policies (lib/policy.lua), absent when there are none: reading it
-- here costs a tenant without policies nothing more. `observe_mode` is the
-- v0.1.26 tenant observe mode (absent = ENFORCE).
-- `prc` (last) is the compiled commit rate limits (lib/policy_rate.lua),
-- absent without any: the settling scripts read it here for nothing more.
local TENANT_READ = {'status', 'default_ttl_ms', 'max_ttl_ms', 'max_extensions', 'default_policy', 'pol', 'observe_mode',
  'prc'}

-- tenant_conf reads the tenant record. No record = runtime-only deployment:
-- no guard, protocol defaults. A malformed record fails closed.
-- kind and risk (optional: the reserve and decide scripts) also read the
-- compiled v0.1.26 rules of that action kind and risk class in the same
-- HMGET (conf.pk, conf.pr: lib/policy.lua's pk:/pr: fields, '' = none), and
-- the reserve rate limits (conf.prr); without them, conf.prc is the commit
-- rate limits (lib/policy_rate.lua).
-- Returns conf, or nil and a message (INTERNAL_ERROR).
local function tenant_conf(key, kind, risk)
  local v
  if kind then
    v = redis.call('HMGET', key, 'status', 'default_ttl_ms', 'max_ttl_ms', 'max_extensions', 'default_policy', 'pol',
      'observe_mode', 'pk:' .. kind, 'pr:' .. risk, 'prr')
  else
    v = redis.call('HMGET', key, unpack(TENANT_READ))
  end
  local conf = {present = false, status = 'ACTIVE', default_ttl = 60000, max_ttl = 0, max_ext = 10, max_ext_s = '10',
    default_policy = '', pol = v[6] or '', observe = 'ENFORCE', pk = '', pr = '', prr = '', prc = ''}
  -- The compiled rate limits (lib/policy_rate.lua): the reserve rates with a
  -- kind (reserve, decide), else the commit rates.
  if kind then
    conf.pk, conf.pr, conf.prr = v[8] or '', v[9] or '', v[10] or ''
  else
    conf.prc = v[8] or ''
  end
  -- None of the fields: no record (no guard), unless the hash exists
  -- without them, which is corrupt (invalid status) exactly as before.
  if not (v[1] or v[2] or v[3] or v[4] or v[5] or v[6] or v[7]) and redis.call('EXISTS', key) == 0 then return conf end
  -- HMGET answers false for a missing field; the fields are read from v
  -- directly (no second table built per call).
  conf.present = true
  conf.status = v[1] or nil
  if not TENANT_STATUSES[v[1] or ''] then return nil, 'tenant record has an invalid status' end
  if v[2] and v[2] ~= '' then
    conf.default_ttl = small_int(v[2])
    if conf.default_ttl == nil then return nil, 'tenant record has an invalid default_ttl_ms' end
    if conf.default_ttl == 0 then conf.default_ttl = 60000 end
  end
  if v[3] and v[3] ~= '' then
    conf.max_ttl = small_int(v[3])
    if conf.max_ttl == nil then return nil, 'tenant record has an invalid max_ttl_ms' end
  end
  if v[4] and v[4] ~= '' then
    conf.max_ext = small_int(v[4])
    if conf.max_ext == nil then return nil, 'tenant record has an invalid max_extensions' end
    -- max_ext_s: the decimal string a record keeps (the stored one when it
    -- is canonical: no number->string conversion on every reserve).
    conf.max_ext_s = (string.byte(v[4], 1) ~= 48 or v[4] == '0') and v[4] or ms(conf.max_ext)
  end
  conf.default_policy = v[5] or ''
  -- v0.1.26 observe mode; absent (every tenant stored before it) is ENFORCE.
  conf.observe = v[7] or 'ENFORCE'
  return conf
end

-- resolve_policy: request value, else the matching scope policy's (from_policy,
-- may be nil), else the tenant default, else ALLOW_IF_AVAILABLE. An invalid
-- tenant default is INVALID_REQUEST (REF).
local function resolve_policy(requested, conf, from_policy)
  if requested ~= '' then
    if not POLICIES[requested] then return nil end
    return requested
  end
  if from_policy and POLICIES[from_policy] then return from_policy end
  if conf.default_policy == '' then return 'ALLOW_IF_AVAILABLE' end
  if not POLICIES[conf.default_policy] then return nil end
  return conf.default_policy
end
