#!lua flags=no-writes
-- policy/get: read one scope policy, or every policy of a tenant.
--
-- KEYS: 1 policies    the tenant's policies hash
-- ARGV: 1 policy_id   '' = all of them (a tenant holds a bounded number)
-- Result: ok() with items: the stored strings (<policy> JSON), decoded by internal/policy.
-- JSON policy/get: items
-- Refusals: NOT_FOUND (a named policy that does not exist).

if ARGV[1] == '' then
  local all = redis.call('HVALS', KEYS[1])
  return ok({items = all})
end
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then return fail('NOT_FOUND', 'policy ' .. ARGV[1] .. ' not found', {policy_id = ARGV[1]}) end
return ok({items = {raw}})
