-- lib/keys.lua: the tenant key layout of internal/keys, for the keys a script
-- derives from data it reads (the keys it is called with arrive in KEYS).
-- Every builder starts from the tenant prefix "cy:{t:<tenant>}:" (KEYS[1] of
-- the tenant scripts), so a derived key stays in the tenant's Cluster slot.
-- internal/script TestLuaKeyLayoutMatchesPkgKeys runs each builder against its
-- internal/keys twin. Included with "-- include: lib/keys.lua" (see internal/script).

-- key_tenant is the tenant id a prefix names.
local function key_tenant(prefix) return string.sub(prefix, 7, -3) end
-- key_budget is the ledger hash of (scope path, unit): Tenant.Budget.
local function key_budget(prefix, scope_path, unit) return prefix .. 'b:' .. scope_path .. ':' .. unit end
-- key_reservation is a reservation's hash: Tenant.Reservation.
local function key_reservation(prefix, id) return prefix .. 'r:' .. id end
-- key_idem is the idempotency record of key on endpoint: Tenant.Idempotency.
local function key_idem(prefix, endpoint, key) return prefix .. 'idem:' .. endpoint .. ':' .. key end
-- key_event is a direct-debit event record: Tenant.Event.
local function key_event(prefix, id) return prefix .. 'ev:' .. id end
-- key_archive_queue is the tenant's archive queue: Tenant.ArchiveQueue.
local function key_archive_queue(prefix) return prefix .. 'archq' end
-- key_quota_counter is a v0.1.26 per_run action-quota counter:
-- Tenant.QuotaCounter (counted: the kind, or '__risk__:<class>'; window
-- 'per_run'; window_key: the run id). Calendar counters are fields of
-- key_quota_day (lib/quota.lua).
local function key_quota_counter(prefix, scope_path, counted, window, window_key)
  return prefix .. 'q:' .. scope_path .. '|' .. counted .. '|' .. window .. '|' .. window_key
end
-- key_quota_day is the tenant's calendar quota counters of one UTC day
-- (day: the day number since 1970-01-01, decimal): Tenant.QuotaDay.
local function key_quota_day(prefix, day) return prefix .. 'qd:' .. day end
-- key_quota_index is the tenant's counter index: Tenant.QuotaCounters.
local function key_quota_index(prefix) return prefix .. 'qidx' end
-- key_policy_rate is the tenant's policy rate-limit counters of one UTC minute
-- (minute: the minute number since 1970-01-01, decimal): Tenant.PolicyRate.
local function key_policy_rate(prefix, minute) return prefix .. 'rl:' .. minute end
-- key_index is a tenant index (Tenant.Deadlines 'deadline', Quarantine
-- 'quarantine', Created 'created', Expires 'expires') or, for 'budgets',
-- Tenant.Budgets.
local function key_index(prefix, name)
  if name == 'budgets' then return prefix .. 'budgets' end
  return prefix .. 'r:' .. name
end
-- missing_tenant is the TENANT_NOT_FOUND refusal when the prefix's tenant has
-- no record (Tenant.Record: prefix .. 'tenant'), else nil: an operator call
-- naming a tenant that does not exist is refused, not answered as a clean,
-- empty tenant.
local function missing_tenant(prefix)
  if redis.call('EXISTS', prefix .. 'tenant') == 1 then return nil end
  local t = key_tenant(prefix)
  return fail('TENANT_NOT_FOUND', 'tenant ' .. t .. ' not found', {tenant_id = t})
end
