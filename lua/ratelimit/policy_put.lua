-- ratelimit/policy_put: create or replace one rate-limit policy.
--
-- KEYS: 1 policies     cy:rl:policies (hash: policy name -> policy JSON)
-- ARGV: 1 name         policy name
--       2 policy       JSON {name, algorithm, limit, window_ms, cap, slack_ms, shadow}
--          (validated and defaulted by internal/ratelimit; re-checked here)
--       3 mode         'create' (refused when the name exists) or 'update' (refused when
--          it does not)
--       4 max_policies maximum number of policies
-- Result   ok({created = bool})
-- Refusal  DUPLICATE_RESOURCE, POLICY_NOT_FOUND, INVALID_REQUEST; before any write.

local name, body, mode = ARGV[1], ARGV[2], ARGV[3]
local max = tonumber(ARGV[4]) or 0
local okd, p = pcall(cjson.decode, body)
if not okd or type(p) ~= 'table' or p.name ~= name or type(p.limit) ~= 'number' or p.limit < 1
  or type(p.window_ms) ~= 'number' or p.window_ms < 1 or type(p.algorithm) ~= 'string' then
  return fail('INVALID_REQUEST', 'malformed policy', {field = 'policy'})
end
local exists = redis.call('HEXISTS', KEYS[1], name) == 1
if mode == 'create' then
  if exists then return fail('DUPLICATE_RESOURCE', 'policy ' .. name .. ' already exists', {policy = name}) end
  if redis.call('HLEN', KEYS[1]) >= max then
    return fail('INVALID_REQUEST', 'too many rate-limit policies', {field = 'policy', max = max})
  end
elseif mode == 'update' then
  if not exists then return fail('POLICY_NOT_FOUND', 'no policy ' .. name, {policy = name}) end
else
  return fail('INVALID_REQUEST', 'unknown mode')
end
redis.call('HSET', KEYS[1], name, body)
return ok({created = not exists})
