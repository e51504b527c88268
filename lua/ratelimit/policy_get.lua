#!lua flags=no-writes
-- ratelimit/policy_get: read one rate-limit policy.
--
-- KEYS: 1 policies     cy:rl:policies
-- ARGV: 1 name         policy name
-- Result   {'OK', <the stored policy JSON>}
-- Refusal  POLICY_NOT_FOUND

local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then return fail('POLICY_NOT_FOUND', 'no policy ' .. ARGV[1], {policy = ARGV[1]}) end
return {'OK', v}
