-- lib/correlation.lua: the deterministic correlation ids of the v0.1.26
-- events (docs/protocol.md#correlation-ids). Included with
-- "-- include: lib/correlation.lua".
--
-- An id is 'cor_' .. the first 32 hex digits of the SHA-1 of its inputs,
-- each written as <length>:<bytes>, so no input can be mistaken for two.
-- The same inputs give the same id on every replica and backend.
-- One top-level local (the table CORR): reserve is close to the embedded
-- store's register limit, where every top-level function costs one.
local CORR = {}

function CORR.hash(...)
  local n = select('#', ...)
  local parts = {}
  for i = 1, n do
    local p = select(i, ...)
    p = p and tostring(p) or ''
    parts[i] = #p .. ':' .. p
  end
  return 'cor_' .. string.sub(redis.sha1hex(table.concat(parts)), 1, 32)
end

-- CORR.quota is the id of one quota counter's window: the grain that joins
-- its quota.threshold_approaching, the denials it causes
-- (reservation.denied, reservation.observed_denied with
-- ACTION_QUOTA_EXCEEDED) and its quota.counter_reset. counted is the action
-- kind, or the risk class for a risk-class quota; window the window's wire
-- name; window_key the window instance (the run id for per_run).
function CORR.quota(tenant, scope, counted, window, window_key)
  return CORR.hash('ACTION_QUOTA_EXCEEDED', tenant, scope, counted, window, window_key)
end

-- CORR.deny is the id of a denial with DenyDetail dd of a call of kind at
-- scope (the event's scope; dd.blocked_by_scope wins when set): a quota
-- denial joins its counter's window (CORR.quota); any other over its
-- reason, tenant, scope, kind and blocking policy, so an observed denial
-- and the enforced one of the same cause share it.
function CORR.deny(tenant, scope, kind, dd)
  if type(dd) ~= 'table' then return nil end
  local qv = dd.quota_violation
  if dd.reason_code == 'ACTION_QUOTA_EXCEEDED' and type(qv) == 'table' then
    return CORR.quota(tenant, qv.scope, qv.risk_class or qv.action_kind, qv.window, qv.window_key)
  end
  return CORR.hash(dd.reason_code, tenant, dd.blocked_by_scope or scope, kind, '', '', dd.blocked_by_policy)
end

-- CORR.run is the id of the observed allows of one run (run_id '' = none:
-- no id, as the protocol asks).
function CORR.run(tenant, scope, run_id)
  if run_id == nil or run_id == '' then return nil end
  return CORR.hash('reservation.observed_allowed', tenant, scope, run_id)
end
